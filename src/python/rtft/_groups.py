"""The step driver's side of rtft.torch's process groups, without importing torch: each group
made for a protector is bound to the communicator of every step that ``Protector.run`` runs and
released (its collectives waited for, an abort raised) before the step returns."""


def _release_all(groups):
    for g in groups:
        g._release(raise_abort=False)


def bind_step(groups, fn):
    """``fn(ctx)`` with every group of ``groups`` bound to the step's communicator of its axis
    (or its own communicator of the step's epoch, for a group of listed ranks);
    when it returns, every group is drained (the step's communicators expire then) and the first
    error of their collectives is raised: ``rtft.AbortedError`` after an abort, which recovers."""
    def step(ctx):
        bound = []
        try:
            for g in sorted(groups, key=lambda g: g._order):  # the same order on every rank
                g._bind_step(ctx)
                bound.append(g)
            fn(ctx)
        except BaseException:
            _release_all(bound)
            raise
        error = None
        for g in bound:
            try:
                g._release()
            except BaseException as e:  # noqa: B902 (each group is drained; the first is raised)
                error = error or e
        if error is not None:
            raise error
    return step
