import clawrl.proxy


def test_version() -> None:
    assert clawrl.proxy.__version__ == "0.1.0"


def test_stand_in_backends_live_in_testing_not_in_the_root() -> None:
    """The scripted and null backends are stand-ins, public only in ``clawrl.proxy.testing``
    (test helpers out of the root surface); the interface stays at the root."""
    import clawrl.proxy.testing as testing

    stand_ins = {"ScriptedBackend", "ScriptedCompletion", "NullBackend"}
    assert stand_ins == set(testing.__all__)
    assert not stand_ins & set(clawrl.proxy.__all__)
    assert all(not hasattr(clawrl.proxy, name) for name in stand_ins)
    assert issubclass(testing.ScriptedBackend, clawrl.proxy.InferenceBackend)
    assert issubclass(testing.NullBackend, clawrl.proxy.InferenceBackend)
