"""Inference backends behind one interface (:class:`~clawrl.proxy.InferenceBackend`, in
``base``); the package root re-exports the interface, :mod:`clawrl.proxy.testing` the
stand-in backends (scripted, null)."""
