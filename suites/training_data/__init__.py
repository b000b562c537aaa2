"""The papers' training-data recipes for ``harness data build`` (one module per paper).

Each module registers a :class:`harness.data.builders.DataRecipe` with
:func:`harness.data.builders.register_recipe`; the engine finds them by this package's name.
Every number-changing setting carries its source (paper section or code file) in its option.
"""
