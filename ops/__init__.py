"""Pure JAX ops: `ops.vtrace` (V-trace targets) and `ops.group_norm` (Group Normalization).

Import from the submodules (`from ops.vtrace import vtrace`); re-exporting `vtrace` and
`group_norm` here would shadow the modules of the same names.
"""
