"""Stand-ins for tests and the model-free demo (named as such, never a model).

- :class:`ScriptedUserSimulator`: a **test simulator**, one scripted query per user turn
  (:func:`scripted_queries` gives the queries of a task), no LLM.
- :func:`scripted_agent_completions`: the **scripted test agent**'s completions for the
  proxy's ``ScriptedBackend`` (:mod:`clawrl.proxy.testing`): well-formed tool calls of the
  reference harness answering each query.
"""

from clawrl.ise_synth.execute import scripted_agent_completions
from clawrl.ise_synth.simulator import ScriptedUserSimulator, scripted_queries

__all__ = ["ScriptedUserSimulator", "scripted_agent_completions", "scripted_queries"]
