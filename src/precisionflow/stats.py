"""How sure a measured accuracy difference is: intervals from paired samples, and three verdicts.

Two engines scored on the same test images are paired samples. Only the discordant images carry
information about their difference: b = images the reference gets right and the engine wrong,
c = the reverse. The top-1 drop is (b - c) / n.

The interval for the drop is Newcombe's hybrid score interval for a difference of paired
proportions (Newcombe 1998, method 10): it combines the Wilson intervals of both accuracies with
the correlation of the pairs. It is chosen over a bootstrap or a scaled interval on b / (b + c)
because those collapse to [0, 0] when no image flips, and "no image flipped on 144 images" does
not show a drop of zero: this interval keeps a width of about 3.8 / n then.

Budgets read the interval, never the bare estimate:
  PASS      the whole interval is within the budget,
  FAIL      the whole interval is beyond it,
  UNDECIDED the interval straddles it -- this sample cannot tell.
numpy and the standard library at import (`precisionflow check` and the planner import it);
ratio_interval imports scipy when called.
"""

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Dict, List, Optional, Sequence

import numpy as np

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
MAX_SCALE = 10_000  # "about N images would decide": search up to this many times the sample


def z_of(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson(successes: float, n: float, confidence: float) -> tuple:
    """Wilson score interval of a proportion (successes / n)."""
    if n <= 0:
        return 0.0, 1.0
    z = z_of(confidence)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact test of "no difference": b of b + c discordant pairs, binomial at 0.5."""
    total = b + c
    if total == 0:
        return 1.0
    tail = sum(math.comb(total, k) for k in range(min(b, c) + 1)) / 2**total
    return min(1.0, 2 * tail)


def newcombe_interval(both: float, b: float, c: float, neither: float, confidence: float) -> tuple:
    """Interval of (b - c) / n, the reference's accuracy minus the engine's, as proportions.

    both = right in both, b = reference right and engine wrong, c = the reverse, neither = wrong in both."""
    n = both + b + c + neither
    if n <= 0:
        return -1.0, 1.0
    p1, p2 = (both + b) / n, (both + c) / n
    l1, u1 = wilson(both + b, n, confidence)
    l2, u2 = wilson(both + c, n, confidence)
    denominator = (both + b) * (c + neither) * (both + c) * (b + neither)
    # Newcombe's estimate of the pairs' correlation, shrunk towards 0 when positive (his correction).
    cross = both * neither - b * c
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0.0)
    phi = cross / math.sqrt(denominator) if denominator > 0 else 0.0
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    difference = p1 - p2
    return max(-1.0, difference - below), min(1.0, difference + above)


@dataclass
class PairedDrop:
    """The reference's accuracy minus the engine's on the same images, in points (0-100)."""

    n: int
    both: int  # right in both
    b: int  # reference right, engine wrong
    c: int  # engine right, reference wrong
    neither: int
    drop: float
    low: float
    high: float
    p_value: float  # McNemar's exact test of "no difference"
    confidence: float

    @property
    def per_image_step(self) -> float:
        return 100.0 / self.n if self.n else float("inf")

    def to_json(self) -> Dict[str, float]:
        return {**asdict(self), "one_image": round(self.per_image_step, 4)}


def paired_drop(reference_correct: Sequence[bool], engine_correct: Sequence[bool], confidence: float) -> PairedDrop:
    """The top-1 drop of an engine against a reference scored on the same images, with its interval."""
    reference_correct, engine_correct = np.asarray(reference_correct, bool), np.asarray(engine_correct, bool)
    if reference_correct.shape != engine_correct.shape:
        raise ValueError(f"paired samples need the same images: {reference_correct.shape} vs {engine_correct.shape}")
    counts = [
        int(np.sum(reference_correct & engine_correct)),
        int(np.sum(reference_correct & ~engine_correct)),
        int(np.sum(~reference_correct & engine_correct)),
        int(np.sum(~reference_correct & ~engine_correct)),
    ]
    return drop_from_counts(*counts, confidence=confidence)


def drop_from_counts(both: int, b: int, c: int, neither: int, confidence: float) -> PairedDrop:
    n = both + b + c + neither
    low, high = newcombe_interval(both, b, c, neither, confidence)
    return PairedDrop(
        n, both, b, c, neither, 100.0 * (b - c) / n if n else 0.0, 100.0 * low, 100.0 * high, mcnemar_exact_p(b, c), confidence
    )


def verdict_at_most(low: float, high: float, limit: float) -> str:
    """A quantity that may be at most `limit` (a drop): judged by its interval [low, high]."""
    if high <= limit:
        return PASS
    return FAIL if low > limit else UNDECIDED


def verdict_at_least(low: float, high: float, limit: float) -> str:
    """A quantity that must be at least `limit` (an agreement)."""
    if low >= limit:
        return PASS
    return FAIL if high < limit else UNDECIDED


def images_to_decide_drop(drop: PairedDrop, limit: float) -> Optional[int]:
    """About how many images (the same rates of flips) would take the drop's interval clear of
    `limit`; None when no sample size would (the estimate sits on the budget)."""
    if abs(drop.drop - limit) < 1e-9:
        return None

    def decided(scale: float) -> bool:
        low, high = newcombe_interval(drop.both * scale, drop.b * scale, drop.c * scale, drop.neither * scale, drop.confidence)
        return verdict_at_most(100 * low, 100 * high, limit) != UNDECIDED

    return _smallest_scale(decided, drop.n)


def images_to_decide_share(successes: int, n: int, limit: float, confidence: float) -> Optional[int]:
    """The same for a proportion (agreement) that must reach `limit`."""
    if n == 0 or abs(successes / n - limit) < 1e-12:
        return None

    def decided(scale: float) -> bool:
        low, high = wilson(successes * scale, n * scale, confidence)
        return verdict_at_least(low, high, limit) != UNDECIDED

    return _smallest_scale(decided, n)


def _smallest_scale(decided, n: int) -> Optional[int]:
    """Smallest sample size n * scale (scale >= 1) at which `decided(scale)` holds, by doubling then
    bisection; None beyond MAX_SCALE."""
    if decided(1.0):
        return n
    high = 2.0
    while not decided(high):
        high *= 2
        if high > MAX_SCALE:
            return None
    low = high / 2
    while high - low > 1.0 / n:  # to within about one image
        middle = (low + high) / 2
        low, high = (low, middle) if decided(middle) else (middle, high)
    return math.ceil(high * n)


def zero_flip_resolution(n: int, confidence: float) -> float:
    """The smallest drop budget (points) that n images can ever pass: the interval's upper end when
    not one image flips. A budget below it is always UNDECIDED."""
    return 100.0 * newcombe_interval(n, 0, 0, 0, confidence)[1] if n else float("inf")


def bootstrap_mean(values: Sequence[float], confidence: float, resamples: int = 2000, seed: int = 0) -> tuple:
    """Percentile bootstrap interval of a per-image mean (e.g. spurious boxes per image)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return 0.0, float("inf")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    return percentile_interval(means, confidence)  # the one percentile rule (paired mAP drops use it too)


COUNT_METHOD = "bootstrap over images, widened to the exact Poisson interval of the total count"


def count_interval(per_image: Sequence[float], confidence: float) -> Optional[tuple]:
    """(low, high) of a per-image mean of counts (spurious boxes per image), or None when there is
    no series or its values have no spread to bound (n identical non-integer values).

    A bootstrap of n identical values has zero width (four images with 0 boxes: [0, 0]); for counts
    the interval is the wider of the bootstrap's and the exact Poisson interval of the total k over
    n images, chi2(a/2; 2k) / 2n to chi2(1 - a/2; 2(k + 1)) / 2n (k = 0, n = 4, 95%: [0, 0.92])."""
    values = np.asarray(per_image, dtype=float)
    if values.size == 0:
        return None
    low, high = bootstrap_mean(values, confidence)
    if np.all(values >= 0) and np.all(values == np.round(values)):
        from scipy.special import chdtri  # chdtri(df, p) = chi2.ppf(1 - p, df); scipy.stats costs 3x its import

        total, tail = float(values.sum()), (1 - confidence) / 2
        exact_low = float(chdtri(2 * total, 1 - tail) / (2 * values.size)) if total > 0 else 0.0
        exact_high = float(chdtri(2 * (total + 1), tail) / (2 * values.size))
        return min(low, exact_low), max(high, exact_high)
    return None if high <= low else (low, high)


def positive_finite(rounds: Sequence[float]) -> List[float]:
    """The rounds that are measurements: a zero, negative, non-finite or missing ratio is none."""
    return [float(r) for r in rounds if r and math.isfinite(r) and r > 0]


def geometric_mean(rounds: Sequence[float]) -> Optional[float]:
    """The speed figure of per-round ratios: exp of their mean logarithm (positive finite rounds
    only), or None without one. The one estimator every speed ratio prints -- the table's, the
    Server ratio, int8_mixed's reasons -- because it is the figure ratio_interval bounds."""
    values = positive_finite(rounds)
    return float(math.exp(np.log(values).mean())) if values else None


def interval_digits(low: float, high: float) -> int:
    """Decimals that show a speed interval as the interval it is: 2, or up to 4 where two decimals
    would print a measured, tight interval as [1.48, 1.48] -- which reads as a certainty."""
    digits = 2
    while digits < 4 and round(low, digits) == round(high, digits):
        digits += 1
    return digits


NOISY_ERROR_PERCENT = 5.0  # a ratio whose geometric mean has a larger standard error (in %) is flagged noisy


def ratio_stats(numerator: Sequence[float], denominator: Sequence[float]) -> Dict[str, float]:
    """Per-round ratios numerator/denominator: their geometric mean (the figure the table shows and
    ratio_interval bounds), range, the rounds' coefficient of variation, and the geometric mean's
    standard error in percent (of the mean log ratio) -- the uncertainty of the figure shown, which
    `noisy` flags above NOISY_ERROR_PERCENT."""
    ratios = np.asarray(numerator, dtype=float) / np.asarray(denominator, dtype=float)
    cv = float(100 * ratios.std(ddof=1) / ratios.mean()) if len(ratios) > 1 else 0.0
    error = float(100 * np.log(ratios).std(ddof=1) / np.sqrt(len(ratios))) if len(ratios) > 1 else 0.0
    return {
        "geomean": geometric_mean(ratios),
        "min": float(ratios.min()),
        "max": float(ratios.max()),
        "cv_percent": cv,
        "error_percent": error,
        "noisy": bool(error > NOISY_ERROR_PERCENT),
        "rounds": [round(float(r), 4) for r in ratios],
    }


def ratio_interval(rounds: Sequence[float], confidence: float) -> Optional[tuple]:
    """(low, high) of a speed ratio's geometric mean from its per-round ratios, or None with fewer
    than two rounds.

    Each round timed both sides close together, so each round's ratio is one paired measurement;
    ratios multiply, so the interval is taken on their logarithms (a t interval of the mean) and
    exponentiated back: it brackets geometric_mean. A bootstrap over 12 rounds would be narrower
    than the rounds warrant."""
    values = np.log(np.asarray(positive_finite(rounds), dtype=float))
    if len(values) < 2:
        return None
    # scipy.special's inverse t CDF: the same quantile as scipy.stats.t.ppf, a third of the import
    # (0.26 s against 0.81 s), paid by every `precisionflow run` that prints verdicts, no-op reruns too
    from scipy.special import stdtrit

    half = float(stdtrit(len(values) - 1, 1 - (1 - confidence) / 2) * values.std(ddof=1) / math.sqrt(len(values)))
    return float(math.exp(values.mean() - half)), float(math.exp(values.mean() + half))


OUTLIER_MADS = 3.0  # a round whose log ratio is this many scaled MADs from the median's is outlying


def outlying_rounds(ratios: Sequence[float]) -> List[int]:
    """Indices of the rounds whose log ratio lies more than OUTLIER_MADS scaled median absolute
    deviations from the median's (none when the rounds barely vary): named wherever a speed ratio
    is quoted -- the table's speed checks and int8_mixed's reasons alike."""
    logs = np.log(np.asarray(ratios, dtype=float))
    centre = float(np.median(logs))
    spread = 1.4826 * float(np.median(np.abs(logs - centre)))
    if spread <= 0:
        return []
    return [index for index, value in enumerate(logs) if abs(value - centre) > OUTLIER_MADS * spread]


def unsound_ratio(rounds: Sequence[float], low: float, high: float, of: str = "rounds") -> str:
    """Why a ratio's geometric mean and its interval cannot be trusted, or "": the median of the
    rounds (or paired searches: `of`) lies outside the interval -- the rounds are bimodal or hold
    outliers, and a t interval over them says more than they do. The one rule for every speed
    figure with an interval (the table's checks, the Server ratio, int8_mixed's reasons)."""
    values = positive_finite(rounds)
    median = float(np.median(values)) if values else float("nan")
    if low <= median <= high:
        return ""
    return f"the {of}' median {median:.2f}x lies outside the interval [{low:.2f}, {high:.2f}]: bimodal or outlying {of}"


def percentile_interval(resampled: Sequence[float], confidence: float) -> tuple:
    """The percentile interval of bootstrap resamples (paired mAP drops, for one): the
    (1 - confidence) / 2 quantile and its mirror."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.asarray(resampled, dtype=float), [tail, 1 - tail])
    return float(low), float(high)
