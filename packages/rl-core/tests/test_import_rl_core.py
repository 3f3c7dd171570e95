import clawrl.rl_core


def test_version() -> None:
    assert clawrl.rl_core.__version__ == "0.1.0"
