"""The bottom layer: the small modules over the C extensions (xsp._core, xsp._torch), which
import nothing else of xsp: errors (the exception classes the core defines), levels (M, L, G),
util (atomic writes, printable text, the formatting of durations and bytes), tree (walks over a
parent array) and iterations (the iteration rule over plain arrays)."""
