import clawrl.sandbox


def test_version() -> None:
    assert clawrl.sandbox.__version__ == "0.1.0"
