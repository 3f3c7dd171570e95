import clawrl.ise_synth


def test_version() -> None:
    assert clawrl.ise_synth.__version__ == "0.1.0"


def test_test_simulator_and_scripted_agent_live_in_testing() -> None:
    """The scripted simulator and scripted test agent are stand-ins, public only in
    ``clawrl.ise_synth.testing``; the simulator interface stays at the root."""
    import clawrl.ise_synth.testing as testing

    stand_ins = {"ScriptedUserSimulator", "scripted_agent_completions", "scripted_queries"}
    assert stand_ins == set(testing.__all__)
    assert not stand_ins & set(clawrl.ise_synth.__all__)
    assert callable(testing.ScriptedUserSimulator().respond)
