"""Published numbers of Ruoss et al. 2023 ("Randomized Positional Encodings Boost Length
Generalization of Transformers"), Tables 1, 3 and 4, as data for the randomized-pe recipe.
Accuracy in %; columns in ``COLUMNS`` order (the recipe's ``SCHEMES``)."""
from __future__ import annotations

COLUMNS = ("none", "sincos", "relative", "alibi", "rope", "learned",
           "rand_sincos", "rand_relative", "rand_alibi", "rand_rope", "rand_learned")
UNSORTED = "rand_sincos_unsorted"          # Table 3 ablation column (not a Table 1 column)

# --- published numbers (Ruoss et al. 2023), accuracy in %, columns in SCHEMES order ------------
# Table 1: averaged over test lengths 41..500, maximised over 10 seeds and 3 learning rates.
_TABLE1 = """
even_pairs                   50.4  50.9  96.4  67.3  51.0  50.7 100.0 100.0  81.5 100.0  97.5
modular_arithmetic           20.1  20.5  21.8  24.2  21.6  20.2  25.7  28.1  21.2  25.5  21.1
parity_check                 51.9  50.5  51.8  51.7  51.3  50.3  52.6  52.2  50.3  52.3  52.6
cycle_navigation             61.9  26.3  23.0  37.6  23.6  24.2  59.0  58.8  29.8  73.6  49.7
stack_manipulation           50.3  50.1  53.6  57.5  51.2  49.2  72.8  77.9  70.6  68.2  69.1
reverse_string               52.8  50.6  58.3  62.3  51.9  50.7  75.6  95.1  77.1  69.9  52.9
modular_arithmetic_brackets  31.0  28.3  30.3  32.5  25.1  25.1  33.8  34.9  31.3  32.7  31.9
solve_equation               20.1  21.0  23.0  25.7  23.1  20.4  24.5  28.1  22.0  24.5  22.1
duplicate_string             52.8  50.7  51.7  51.3  50.9  50.8  72.4  75.1  68.9  68.9  53.0
missing_duplicate_string     52.5  51.3  54.0  54.3  56.5  51.0  52.5 100.0  79.7  88.7  52.7
odds_first                   52.8  51.6  52.7  51.4  51.3  50.6  65.9  69.3  64.7  65.6  52.7
binary_addition              50.1  49.8  54.3  51.4  50.4  49.8  64.4  64.5  56.2  60.2  61.7
binary_multiplication        49.9  50.1  52.2  51.0  50.2  49.6  52.1  50.1  50.5  51.7  51.9
compute_sqrt                 50.2  50.1  52.4  50.9  50.5  50.2  52.5  53.3  51.2  52.3  52.0
bucket_sort                  23.7  30.1  91.9  38.8  30.6  25.9 100.0 100.0  99.6  99.6  99.5
"""
# Table 4: mean and std over the 10 seeds at the best learning rate (pairs "mean std").
_TABLE4 = """
even_pairs                   50.1 0.1  50.4 0.2  67.6 15.3 59.8 3.2  50.4 0.3  50.4 0.2  99.7 0.3  99.6 0.6  71.4 5.6  100.0 0.0 96.2 0.7
modular_arithmetic           20.0 0.0  20.2 0.2  20.7 0.5  23.2 0.9  20.8 0.5  20.1 0.1  24.2 1.4  24.9 1.7  20.8 0.3  23.5 1.6  20.2 0.4
parity_check                 50.4 0.8  50.3 0.2  50.4 0.6  50.5 0.6  50.4 0.4  50.0 0.1  51.1 1.3  51.4 0.5  50.0 0.2  50.4 1.0  50.6 0.9
cycle_navigation             33.9 10.5 23.8 1.4  21.7 0.8  31.1 3.8  22.3 0.9  21.0 1.2  30.3 10.7 45.9 9.9  26.3 2.4  52.9 15.3 31.9 8.2
stack_manipulation           50.2 0.1  47.3 1.9  50.1 3.3  51.0 8.0  49.6 3.0  44.9 3.7  69.2 3.2  71.7 4.7  69.5 1.1  66.0 2.0  66.1 2.5
reverse_string               52.7 0.1  50.4 0.1  54.2 1.5  56.3 2.6  51.2 0.3  50.4 0.2  72.9 1.6  77.1 6.6  75.1 1.3  67.7 1.1  52.7 0.2
modular_arithmetic_brackets  31.0 0.1  24.3 2.2  26.1 2.0  28.1 3.4  24.0 2.4  22.3 1.5  29.6 4.6  28.8 5.5  29.3 1.6  28.6 3.9  30.3 2.6
solve_equation               20.1 0.0  20.9 0.2  21.9 0.7  23.6 1.9  21.9 0.6  20.2 0.2  23.6 0.5  25.4 1.8  21.1 0.7  22.3 1.6  21.1 0.7
duplicate_string             52.7 0.1  50.4 0.2  51.0 0.4  51.0 0.2  50.4 0.2  50.4 0.2  69.0 2.9  73.1 1.5  67.9 1.4  67.1 2.0  52.8 0.1
missing_duplicate_string     51.4 1.0  50.1 0.6  51.1 1.1  53.5 0.4  53.9 1.6  50.1 0.4  50.4 1.5  91.4 9.8  75.2 3.4  73.2 1.2  51.2 1.4
odds_first                   52.7 0.1  51.3 0.2  51.5 0.5  51.1 0.2  50.8 0.2  50.5 0.1  62.5 2.0  65.9 1.6  62.2 1.4  62.9 1.3  52.7 0.1
binary_addition              49.4 0.3  47.3 3.8  51.7 1.3  48.5 3.6  47.8 5.4  48.9 0.8  61.2 1.7  62.0 1.1  54.3 1.5  57.4 1.2  59.9 1.3
binary_multiplication        49.8 0.0  48.8 1.0  50.2 3.5  49.9 2.3  49.6 0.6  48.7 1.7  51.8 0.2  39.1 7.1  49.2 1.2  45.7 6.6  51.6 0.2
compute_sqrt                 50.2 0.0  50.1 0.0  51.5 0.4  50.5 0.2  50.3 0.1  50.1 0.1  51.9 0.5  52.4 0.6  51.1 0.1  51.8 0.3  51.0 0.8
bucket_sort                  23.7 0.0  25.6 2.6  83.4 6.6  29.3 6.7  23.6 3.8  20.7 2.9  99.3 0.4  99.4 0.3  98.8 0.7  99.3 0.3  98.9 0.4
"""
# Table 3: randomized sin/cos, max over seeds x lrs, (w/o sorting, w/ sorting).
_TABLE3 = """
even_pairs 50.4 100.0
modular_arithmetic 20.0 25.7
parity_check 52.2 52.6
cycle_navigation 59.3 59.0
stack_manipulation 50.4 72.8
reverse_string 52.8 75.6
modular_arithmetic_brackets 31.0 33.8
solve_equation 20.2 24.5
duplicate_string 52.8 72.4
missing_duplicate_string 53.1 52.5
odds_first 52.8 65.9
binary_addition 50.0 64.4
binary_multiplication 49.9 52.1
compute_sqrt 50.2 52.5
bucket_sort 23.7 100.0
"""


def _parse(block: str, width: int) -> dict[str, list[float]]:
    out = {}
    for line in block.strip().splitlines():
        name, *vals = line.split()
        assert len(vals) == width, (name, len(vals))
        out[name] = [float(v) for v in vals]
    return out


_KEYS = list(COLUMNS)
PAPER_TABLE1 = {t: dict(zip(_KEYS, v)) for t, v in _parse(_TABLE1, 11).items()}
PAPER_TABLE4 = {t: {k: (v[2 * i], v[2 * i + 1]) for i, k in enumerate(_KEYS)}
                for t, v in _parse(_TABLE4, 22).items()}
PAPER_TABLE3 = {t: {UNSORTED: v[0], "rand_sincos": v[1]} for t, v in _parse(_TABLE3, 2).items()}
