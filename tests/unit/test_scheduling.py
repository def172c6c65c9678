"""Which worker runs which tests: a module at a time, machine-wide fixtures' modules together."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import MACHINE_WIDE, machine_wide_unit, unit_of

REPO = Path(__file__).resolve().parents[2]


def test_each_test_of_a_module_is_in_its_modules_unit(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one(target): ...\n")
    ids = [
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two[x::y]",
        "tests/test_a.py::TestCase::test_three",
    ]
    assert {unit_of(nodeid, tmp_path) for nodeid in ids} == {"tests/test_a.py"}


def test_modules_that_name_a_machine_wide_fixture_share_one_unit(tmp_path: Path) -> None:
    (fixture, unit), *_ = MACHINE_WIDE.items()
    (tmp_path / "test_b.py").write_text(f"def test_b({fixture}): ...\n")
    (tmp_path / "test_c.py").write_text(f"def test_c(harness, {fixture}): ...\n")
    # A longer name that contains it is another fixture.
    (tmp_path / "test_d.py").write_text(f"def test_d({fixture}_nodes): ...\n")
    assert unit_of("test_b.py::test_b", tmp_path) == unit
    assert unit_of("test_c.py::test_c", tmp_path) == unit
    assert unit_of("test_d.py::test_d", tmp_path) == "test_d.py"


def test_the_envoy_gateway_modules_of_this_suite_share_a_worker() -> None:
    # Envoy Gateway binds fixed ports: two workers running it at once fail.
    unit = MACHINE_WIDE["sim_target"]
    assert machine_wide_unit(REPO / "tests" / "integration" / "test_gateway_controllers.py") == unit
    assert machine_wide_unit(REPO / "tests" / "integration" / "test_operator.py") is None
