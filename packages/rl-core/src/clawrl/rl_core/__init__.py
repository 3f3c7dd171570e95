"""Tree-packed GRPO, PPO and SFT for LLM agents.

One forward pass over a packed prefix tree (``clawrl.prefixtree.PackedTree``) gives exactly the
losses and gradients of training every root-to-leaf path separately; the math lives in short
functions (advantages, losses, corrections), the trainer orchestrates.
"""

# Each module whose whole public set (its ``__all__``) is public here is star-imported and its
# ``__all__`` spliced into ours, so each name is listed once, where it is defined; from the
# others (flex, trainer, distributed) only the names below are re-exported.
from clawrl.rl_core import advantages as _advantages
from clawrl.rl_core import config as _config
from clawrl.rl_core import corrections as _corrections
from clawrl.rl_core import errors as _errors
from clawrl.rl_core import forward as _forward
from clawrl.rl_core import losses as _losses
from clawrl.rl_core import packing as _packing
from clawrl.rl_core import sampling as _sampling
from clawrl.rl_core import sft as _sft
from clawrl.rl_core import step as _step
from clawrl.rl_core import value as _value
from clawrl.rl_core.advantages import *  # noqa: F403
from clawrl.rl_core.config import *  # noqa: F403
from clawrl.rl_core.corrections import *  # noqa: F403
from clawrl.rl_core.distributed import broadcast_batch, partition_by_tokens
from clawrl.rl_core.errors import *  # noqa: F403
from clawrl.rl_core.flex import tree_block_mask
from clawrl.rl_core.forward import *  # noqa: F403
from clawrl.rl_core.losses import *  # noqa: F403
from clawrl.rl_core.packing import *  # noqa: F403
from clawrl.rl_core.sampling import *  # noqa: F403
from clawrl.rl_core.sft import *  # noqa: F403
from clawrl.rl_core.step import *  # noqa: F403
from clawrl.rl_core.trainer import Trainer, seed_everything
from clawrl.rl_core.value import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "Trainer",
    "__version__",
    "broadcast_batch",
    "partition_by_tokens",
    "seed_everything",
    "tree_block_mask",
    *_advantages.__all__,
    *_config.__all__,
    *_corrections.__all__,
    *_errors.__all__,
    *_forward.__all__,
    *_losses.__all__,
    *_packing.__all__,
    *_sampling.__all__,
    *_sft.__all__,
    *_step.__all__,
    *_value.__all__,
]
