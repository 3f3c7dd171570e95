import clawrl.proxy


def test_version() -> None:
    assert clawrl.proxy.__version__ == "0.1.0"
