"""The checks, one module per API family; importing a module registers its checks.

The harness finds them on disk (``harness.registry.load_checks`` imports every module
here, subpackages included): a new family is a new module, listed nowhere else.
"""
