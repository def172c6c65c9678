"""A kubeconfig beside a cloud identity gives only server and CA; the cross-namespace grant."""

from __future__ import annotations

import pytest
import yaml

from modelplane.api.spec import SecretType
from modelplane.credentials.connect import (
    Credentials,
    CredentialsError,
    Identity,
    connect,
    granted,
    vetted_kubeconfig,
)
from modelplane.credentials.kubeconfig import (
    KubeconfigError,
    parse_kubeconfig,
    vet_kubeconfig,
    without_credentials,
)

GKE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "gke_proj_zone_west", "cluster": {"server": "https://127.0.0.1:1"}},
    ],
    "users": [
        {
            "name": "gke-user",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "gke-gcloud-auth-plugin",
                },
                "token": "kubeconfig-own-token",
            },
        }
    ],
    "contexts": [
        {"name": "west", "context": {"cluster": "gke_proj_zone_west", "user": "gke-user"}}
    ],
    "current-context": "west",
}


def test_an_exec_user_is_refused_naming_the_identity_entry_as_the_way_out() -> None:
    with pytest.raises(KubeconfigError, match=r"cloud identity entry in spec\.secrets"):
        parse_kubeconfig(yaml.safe_dump(GKE_KUBECONFIG))


def test_without_credentials_empties_every_user_and_keeps_server_and_ca() -> None:
    doc = without_credentials(GKE_KUBECONFIG)
    text = yaml.safe_dump(doc)
    assert "kubeconfig-own-token" not in text and "gke-gcloud-auth-plugin" not in text
    config = vet_kubeconfig(doc)
    assert config.cluster.server == "https://127.0.0.1:1"
    assert config.context.cluster == "gke_proj_zone_west"
    assert config.user is not None and config.user.token is None and config.user.exec is None
    # A copy: the document read is left as it is.
    assert GKE_KUBECONFIG["users"][0]["user"]["token"] == "kubeconfig-own-token"


def test_without_credentials_leaves_what_is_not_a_user_for_the_vetting_to_name() -> None:
    doc = {**GKE_KUBECONFIG, "users": ["not-a-user"]}
    assert without_credentials(doc) == doc
    assert without_credentials({"users": None}) == {"users": None}


def test_a_broken_kubeconfig_beside_an_identity_is_named_as_such() -> None:
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        vetted_kubeconfig("[1, 2", identity=True, allow_unsafe=False)


async def test_an_unsupported_identity_type_is_refused_not_fallen_back_from() -> None:
    creds = Credentials(
        yaml.safe_dump(GKE_KUBECONFIG),
        Identity(SecretType.KUBECONFIG, b"anything", "Secret ns/x key 'k'"),
    )
    with pytest.raises(CredentialsError) as caught:
        await connect(creds)
    assert caught.value.reason == "CloudIdentityUnsupported"


async def test_malformed_identity_data_is_identity_invalid_before_any_connection() -> None:
    creds = Credentials(
        yaml.safe_dump(GKE_KUBECONFIG),
        Identity(SecretType.GOOGLE_APPLICATION_CREDENTIALS, b"{not json", "Secret ns/sa key 'k'"),
    )
    with pytest.raises(CredentialsError) as caught:
        await connect(creds)
    assert caught.value.reason == "IdentityInvalid"
    assert "Secret ns/sa key 'k'" in str(caught.value)


def test_identity_and_credentials_never_show_the_credential_in_repr() -> None:
    creds = Credentials("kubeconfig-text", Identity(SecretType.KUBECONFIG, b"KEYDATA", "s"))
    assert "KEYDATA" not in repr(creds) and "kubeconfig-text" not in repr(creds)


@pytest.mark.parametrize(
    ("annotation", "namespace", "ok"),
    [
        (None, "team-a", False),
        ("", "team-a", False),
        ("team-a", "team-a", True),
        ("team-b, team-a", "team-a", True),
        ("team-b,team-c", "team-a", False),
        ("*", "team-a", True),
        ("team-a-suffix", "team-a", False),
    ],
)
def test_the_grant_names_namespaces_or_everyone(
    annotation: str | None, namespace: str, ok: bool
) -> None:
    annotations = {} if annotation is None else {"modelplane.ai/allowed-namespaces": annotation}
    assert granted(annotations, namespace) is ok
