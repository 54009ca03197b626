"""Scaling laws in (N, D) and their fits, with no file I/O: the law registry, the robust
multi-start L-BFGS fitter with bootstrap CIs, hold-out validation, IsoFLOP approaches and the
compute-optimal allocation."""
