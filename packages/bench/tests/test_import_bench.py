import clawrl.bench


def test_version() -> None:
    assert clawrl.bench.__version__ == "0.1.0"
