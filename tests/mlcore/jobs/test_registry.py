import subprocess
import sys


def test_importing_the_registry_and_every_spec_does_not_import_torch():
    code = (
        "import sys; from mlcore.jobs.registry import all_kinds; "
        "kinds = all_kinds(); [k.spec.describe() for k in kinds]; "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(len(kinds))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 1


def test_extra_kinds_come_from_the_environment():
    from mlcore.jobs.registry import get_kind

    assert get_kind("test-exercise").spec.queue == "cpu"


def test_an_unknown_kind_lists_the_known_ones():
    import pytest

    from mlcore.jobs.registry import UnknownKind, get_kind

    with pytest.raises(UnknownKind, match="test-exercise"):
        get_kind("no-such-kind")
