"""The level letters of XSP's leveled measurement: M (model), L (layer), G (GPU)."""

LEVEL_NAMES = {"M": "model", "L": "layer", "G": "GPU"}
ORDER = "MLG"
_SEPARATORS = " ,/+"


def parse_levels(levels):
    """Returns the levels as a string of letters in M, L, G order.

    Accepts letters in any order and case, optionally separated by spaces, commas, slashes or
    plus signs ("MLG", "lm", "M/L"). Raises TypeError for a non-string and ValueError naming the
    valid letters for an unknown letter or an empty string.  Whether G can be recorded here is
    decided when a profile starts (xsp.profile raises LevelUnavailableError).
    """
    if not isinstance(levels, str):
        raise TypeError("levels must be a string of level letters such as 'ML', not %s"
                        % type(levels).__name__)
    letters = set()
    for ch in levels:
        if ch in _SEPARATORS:
            continue
        up = ch.upper()
        if up not in LEVEL_NAMES:
            raise ValueError(
                "unknown level letter %r in levels=%r; valid letters are %s"
                % (ch, levels, ", ".join("%s (%s)" % kv for kv in LEVEL_NAMES.items())))
        letters.add(up)
    if not letters:
        raise ValueError("levels=%r names no level; use letters from M (model), L (layer), G (GPU)"
                         % (levels,))
    return "".join(c for c in ORDER if c in letters)
