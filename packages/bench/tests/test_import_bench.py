import clawrl.bench


def test_version() -> None:
    assert clawrl.bench.__version__ == "0.1.0"


def test_task_image_and_agentbench_internals_stay_in_their_modules() -> None:
    """The root lists the task-image and AgentBench entry points, not their helpers
    (a smaller public surface); the helpers stay importable from their modules."""
    import clawrl.bench.base_images as base_images
    import clawrl.bench.tasks.agentbench_os as agentbench_os
    import clawrl.bench.verifier_diagnosis as verifier_diagnosis

    public = set(clawrl.bench.__all__)
    assert {"TaskImage", "TaskImageError", "build_task_image", "load_agentbench_os"} <= public
    for mod in (agentbench_os, base_images, verifier_diagnosis):
        internal = set(mod.__all__) - {"load_agentbench_os", "BASE_RECIPES", "BaseRecipe"}
        assert internal and not internal & public, mod.__name__
