"""Task layouts: how a task directory (or suite file) written for one benchmark becomes a
:class:`~clawrl.bench.Task`."""
