import clawrl.ise_synth


def test_version() -> None:
    assert clawrl.ise_synth.__version__ == "0.1.0"
