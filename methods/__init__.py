"""Training methods behind one interface (:mod:`methods.base`); one module per method family."""
from methods.base import Checkpoint, Method, get_method, list_methods, register_method

__all__ = ["Checkpoint", "Method", "get_method", "list_methods", "register_method"]
