"""Mirror rules and image references: table tests of the pure rewrite."""

from __future__ import annotations

import pytest

from modelplane.catalog.images import (
    EnvEntry,
    ImageError,
    ImageRef,
    Images,
    ImageSite,
    Prefix,
    ProductObject,
    PullSecrets,
    Reference,
    RegistryAndRepository,
    Repository,
)
from modelplane.catalog.types import ValuesRead
from modelplane.plan.images import (
    MirrorRule,
    check_secret_names,
    image_values,
    merge,
    parse_rules,
    product_images,
    rewrite_text,
)


@pytest.mark.parametrize(
    ("text", "registry", "path", "tag", "digest"),
    [
        (
            "quay.io/jetstack/cert-manager-controller:v1.20.2",
            "quay.io",
            "jetstack/cert-manager-controller",
            "v1.20.2",
            None,
        ),
        (
            "envoyproxy/envoy:distroless-v1.38.3",
            "docker.io",
            "envoyproxy/envoy",
            "distroless-v1.38.3",
            None,
        ),
        ("busybox", "docker.io", "library/busybox", None, None),
        ("localhost:5000/a/b:1", "localhost:5000", "a/b", "1", None),
        (
            "mirror.internal:5000/a@sha256:" + "0" * 64,
            "mirror.internal:5000",
            "a",
            None,
            "sha256:" + "0" * 64,
        ),
        ("ghcr.io/x/y:1.0@sha256:" + "a" * 64, "ghcr.io", "x/y", "1.0", "sha256:" + "a" * 64),
    ],
)
def test_references_split_as_runtimes_read_them(
    text: str, registry: str, path: str, tag: str | None, digest: str | None
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.path, ref.tag, ref.digest) == (registry, path, tag, digest)


@pytest.mark.parametrize(
    "text", ["", "Quay.io/UPPER/x", "quay.io/a//b", "quay.io/a:b:c", "x@sha256:zz", "a" * 300]
)
def test_a_malformed_reference_is_refused(text: str) -> None:
    with pytest.raises(ImageError):
        ImageRef.parse(text)


RULES = parse_rules(
    ["*=mirror.internal", "quay.io=mirror.internal/quay", "quay.io/jetstack=jet.internal/js"]
)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        # The most specific rule wins, and tags and digests stay.
        ("quay.io/jetstack/trust-manager:v0.25.0", "jet.internal/js/trust-manager:v0.25.0"),
        (
            "quay.io/prometheus/prometheus:v3.11.3",
            "mirror.internal/quay/prometheus/prometheus:v3.11.3",
        ),
        ("registry.k8s.io/lws/lws:v0.8.0", "mirror.internal/lws/lws:v0.8.0"),
        (
            "envoyproxy/envoy:distroless-v1.38.3",
            "mirror.internal/envoyproxy/envoy:distroless-v1.38.3",
        ),
        # A prefix matches at a path boundary only.
        ("quay.io/jetstackish/x:1", "mirror.internal/quay/jetstackish/x:1"),
        ("nvcr.io/a@sha256:" + "b" * 64, "mirror.internal/a@sha256:" + "b" * 64),
    ],
)
def test_the_most_specific_rule_moves_an_image(image: str, expected: str) -> None:
    assert rewrite_text(image, RULES) == expected


def test_an_image_no_rule_names_is_left_alone() -> None:
    rules = parse_rules(["quay.io=mirror.internal"])
    assert rewrite_text("ghcr.io/a/b:1", rules) == "ghcr.io/a/b:1"


@pytest.mark.parametrize(
    "text",
    [
        "quay.io",  # no '='
        "quay=mirror.internal",  # FROM is not a host
        "quay.io=mirror",  # TO is not a host
        "quay.io/UP=mirror.internal",
        "*=",
        "x" * 600,
    ],
)
def test_a_bad_rule_is_refused_with_what_is_wrong(text: str) -> None:
    with pytest.raises(ImageError):
        MirrorRule.parse(text)


def test_two_rules_for_one_source_are_refused() -> None:
    with pytest.raises(ImageError, match="two mirror rules"):
        parse_rules(["quay.io=a.internal", "quay.io/=b.internal"])


def test_secret_names_are_checked_and_deduplicated() -> None:
    assert check_secret_names(["pull", "pull", "b.c"]) == ("pull", "b.c")
    with pytest.raises(ImageError):
        check_secret_names(["Not_A_Name"])


SITES = Images(
    sites=(
        ImageSite(
            "quay.io/jetstack/cert-manager-controller:{version}", Repository("image.repository")
        ),
        ImageSite(
            "quay.io/prometheus/prometheus:v3.11.3",
            RegistryAndRepository("p.image.registry", "p.image.repository"),
        ),
        ImageSite("docker.io/envoyproxy/gateway:{version}", Reference("global.images.gw.image")),
        ImageSite("ghcr.io/kai/kai/operator:{version}", Prefix("global.registry")),
        ImageSite("ghcr.io/kai/kai/binder:{version}", Prefix("global.registry")),
        ImageSite(
            "ghcr.io/grove/grove-initc:{version}",
            EnvEntry("deployment.env", "INITC", (("OTHER", "1"),)),
        ),
        ImageSite("example.com/fixed:1", None),
    ),
    pull_secrets=PullSecrets(("global.imagePullSecrets", "extra.secrets")),
)


def test_every_setting_shape_is_rewritten_in_its_own_values() -> None:
    values, uses, refused = image_values(
        "c", SITES, "v1", parse_rules(["*=mirror.internal"]), ("pull",)
    )
    assert refused == []
    assert values == {
        "image": {"repository": "mirror.internal/jetstack/cert-manager-controller"},
        "p": {"image": {"registry": "mirror.internal", "repository": "prometheus/prometheus"}},
        "global": {
            "images": {"gw": {"image": "mirror.internal/envoyproxy/gateway:v1"}},
            "registry": "mirror.internal/kai/kai",
            "imagePullSecrets": [{"name": "pull"}],
        },
        "deployment": {
            "env": [
                {"name": "INITC", "value": "mirror.internal/grove/grove-initc"},
                {"name": "OTHER", "value": "1"},
            ]
        },
        "extra": {"secrets": [{"name": "pull"}]},
    }
    by_image = {u.image: u for u in uses}
    assert by_image["ghcr.io/kai/kai/binder:v1"].mirrored == "mirror.internal/kai/kai/binder:v1"
    fixed = by_image["example.com/fixed:1"]
    assert (fixed.mirrored, fixed.settable) == (None, False)


def test_without_rules_nothing_is_set() -> None:
    values, uses, _ = image_values("c", SITES, "v1", ())
    assert values == {}
    assert all(u.mirrored is None for u in uses)


def test_a_rule_inside_a_prefix_cannot_move_it() -> None:
    rules = parse_rules(["ghcr.io/kai/kai/operator=mirror.internal/op"])
    values, uses, _ = image_values("c", SITES, "v1", rules)
    assert "global" not in values
    assert {u.image: u.mirrored for u in uses}["ghcr.io/kai/kai/operator:v1"] is None


# A chart version that reads every path of SITES but the prometheus registry
# and one of the two pull-secret lists.
PARTLY = ValuesRead(
    "v1",
    (
        "image.repository",
        "p.image.repository",
        "global.images",
        "global.registry",
        "global.imagePullSecrets",
        "deployment.env",
    ),
)


def test_a_path_the_chart_does_not_read_is_refused_not_set() -> None:
    values, uses, refused = image_values(
        "c", SITES, "v1", parse_rules(["*=mirror.internal"]), ("pull",), PARTLY
    )
    assert refused == ["p.image.registry", "extra.secrets"]
    # Half a setting would move half an image: its repository is not set either.
    assert "p" not in values and "extra" not in values
    assert values["global"]["imagePullSecrets"] == [{"name": "pull"}]
    # The image whose setting is half ignored is not moved, and says so.
    prometheus = {u.image: u for u in uses}["quay.io/prometheus/prometheus:v3.11.3"]
    assert (prometheus.mirrored, prometheus.settable) == (None, False)


def test_without_rules_an_ignored_setting_refuses_nothing() -> None:
    values, uses, refused = image_values("c", SITES, "v1", (), reads=PARTLY)
    assert (values, refused) == ({}, [])
    assert not {u.image: u for u in uses}["quay.io/prometheus/prometheus:v3.11.3"].settable


def test_a_chart_that_reads_no_pull_secret_path_gets_none() -> None:
    reads = ValuesRead("v1", ("image.repository",))
    site = Images(sites=SITES.sites[:1], pull_secrets=PullSecrets(("imagePullSecrets",)))
    values, _, refused = image_values(
        "c", site, "v1", parse_rules(["*=mirror.internal"]), ("pull",), reads
    )
    assert values == {"image": {"repository": "mirror.internal/jetstack/cert-manager-controller"}}
    assert refused == ["imagePullSecrets"]


def test_merge_keeps_what_the_overlay_does_not_name() -> None:
    base = {"a": {"b": 1, "c": [1]}, "d": 2}
    assert merge(base, {"a": {"c": [2]}}) == {"a": {"b": 1, "c": [2]}, "d": 2}


PROXY = ImageSite("docker.io/envoyproxy/envoy:distroless-v1.38.3", ProductObject("the proxy"))
SERVER = ImageSite("nvcr.io/nvidia/server:{version}", ProductObject("the server"))
OWN = Images(sites=(PROXY, ImageSite("docker.io/envoyproxy/gateway:{version}", None)))


def test_a_product_objects_image_is_not_a_chart_value() -> None:
    values, uses, _ = image_values("eg", OWN, "v1", parse_rules(["*=mirror.internal"]))
    assert values == {}
    assert [u.image for u in uses] == ["docker.io/envoyproxy/gateway:v1"]


def test_product_images_are_moved_and_listed_under_their_component() -> None:
    rules = parse_rules(["docker.io=mirror.internal"])
    given = [("eg", OWN, "v1"), ("mx", Images(sites=(SERVER,)), "0.4.1")]
    product, uses = product_images(given, rules, ("pull",))
    assert product.moved == {PROXY: "mirror.internal/envoyproxy/envoy:distroless-v1.38.3"}
    assert product.pull_secrets == ("pull",)
    assert [(u.component, u.image, u.mirrored) for u in uses] == [
        ("eg", "docker.io/envoyproxy/envoy:distroless-v1.38.3", PROXY_MIRRORED),
        ("mx", "nvcr.io/nvidia/server:0.4.1", None),
    ]


PROXY_MIRRORED = "mirror.internal/envoyproxy/envoy:distroless-v1.38.3"
