import clawrl.prefixtree


def test_version() -> None:
    assert clawrl.prefixtree.__version__ == "0.1.0"
