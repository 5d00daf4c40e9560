"""PushT's goal coverage read from pixels: where the T block is in a 96x96 frame, and how much of the goal it covers.

gym-pusht (``gym_pusht/envs/pusht.py``) scores a state by its *coverage*: the area of the T block
inside the T-shaped goal region divided by the goal's area (shapely on the pymunk polygons);
reward ``clip(coverage / 0.95, 0, 1)``, success when ``coverage > success_threshold`` (0.95,
``PushTEnv.__init__``). An imagined world has no state, only pixels, so this module reads the
coverage back from a frame in the colours gym-pusht renders (``PushTEnv._draw`` and
``pymunk_override.DrawOptions``): white background, the goal ``LightGreen`` (144, 238, 144) at the
fixed pose (256, 256, pi/4), the block ``LightSlateGray`` (119, 136, 153) outlines around a fill 1.2
times lighter (143, 163, 184), the agent ``RoyalBlue`` discs, ``LightGray`` walls; the 512x512
canvas is resized to 96x96 by ``cv2.resize`` (bilinear, each output pixel a sample of the canvas).

Counting block pixels inside the goal is not enough: at 96x96 a pixel is 5.3 canvas units wide,
and even a perfect per-pixel segmentation of gym-pusht's own frames misses the true coverage by
up to 0.04 (1.4% rms). So the coverage is computed from the block's *pose*, fitted to the
segmentation (analysis by synthesis), then intersected exactly with the goal polygon:

1. segmentation: every pixel takes the label of the nearest rendered colour (block: fill or
   outline; unknown: agent or contact dots, ignored; else background); a 3x3 opening keeps the
   block's body (antialiased agent rims and stray pixels drop out);
2. a smooth fit: moments give four candidate poses (the T's long axis, both ways, and across);
   Levenberg-Marquardt fits a soft T template (signed distance, outline-dilated) to the block mask;
3. an exact refinement (when gym-pusht's renderer is importable): a pattern search over the pose
   minimising the colour difference between the frame and gym-pusht's own drawing code rendering
   the T at that pose, resampled as ``cv2.resize`` does;
4. coverage: the fitted T intersected with the goal (exact convex clipping of the two rectangles
   of each), over the goal's area.

On gym-pusht's frames this reads ``info["coverage"]`` to 0.002 on average and 0.019-0.021 at worst
(1,600 frames with coverage > 0 from random, scripted and near-goal play; p99 0.009); without
step 3, 0.005 on average and 0.032 at worst. The worst cases are poses a 96x96 frame cannot tell
apart: renders that differ from the frame in one or two pixels and in coverage by 0.02. About 25
ms a frame for steps 1-2 and 50-100 ms with step 3 (one core of a busy 2-core CPU), which runs only
where the block overlaps the goal. A frame without a recognisable T (too few or too many block pixels, or a
poor fit) has coverage 0: an imagined world earns reward only for a block it draws.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# What to run where gym-pusht is missing (the package is installed from a clone; gym-pusht from the index).
PUSHT_INSTALL = "pip install 'gym-pusht>=0.1.8,<0.2' (in a clone of this repository: pip install -e '.[pusht]')"

SIZE = 96  # gym-pusht's observation_width/height
CANVAS = 512  # gym-pusht draws on a 512x512 pygame surface, then cv2.resize to SIZE
SUCCESS_THRESHOLD = 0.95  # gym_pusht.envs.pusht.PushTEnv.__init__: self.success_threshold
GOAL_POSE = np.array([256.0, 256.0, np.pi / 4])  # PushTEnv._setup: self.goal_pose
# The T in its body frame (PushTEnv.add_tee, scale 30, length 4): two rectangles as (centre u, centre
# v, half width, half height); world = position + R(angle) @ (u, v), as pymunk's local_to_world.
T_RECTS = np.array([[0.0, 15.0, 60.0, 15.0], [0.0, 75.0, 15.0, 45.0]])
T_AREA = 120.0 * 30.0 + 30.0 * 90.0
T_CENTROID_V = (120.0 * 30.0 * 15.0 + 30.0 * 90.0 * 75.0) / T_AREA  # the area centroid, on the v axis

# gym-pusht's colours (pygame.Color names in PushTEnv; DrawOptions fills polygons 1.2x lighter)
WHITE, GOAL_GREEN = (255, 255, 255), (144, 238, 144)
BLOCK_FILL, BLOCK_EDGE = (143, 163, 184), (119, 136, 153)
AGENT, AGENT_LIGHT, WALL, CONTACT = (65, 105, 225), (78, 126, 255), (211, 211, 211), (231, 76, 60)
BACKGROUND, BLOCK, UNKNOWN = 0, 1, 2
PALETTE = np.array([WHITE, (233, 233, 233), (248, 248, 248), WALL, GOAL_GREEN, BLOCK_FILL, BLOCK_EDGE, AGENT,
                    AGENT_LIGHT, CONTACT], dtype=np.float32)  # every colour gym-pusht renders
AGENT_INDICES = tuple(i for i, colour in enumerate(PALETTE.tolist()) if tuple(colour) in (AGENT, AGENT_LIGHT))
_LABELS = np.array([BACKGROUND] * 5 + [BLOCK] * 2 + [UNKNOWN] * 3)

# The canvas point each output pixel samples (pygame coordinates: pixel centres at integers), as
# cv2.resize's INTER_LINEAR maps destination to source: (j + 0.5) * scale - 0.5.
_SAMPLES = (np.arange(SIZE) + 0.5) * (CANVAS / SIZE) - 0.5
_X, _Y = np.meshgrid(_SAMPLES, _SAMPLES)
_DILATE = 2.0  # the block's outline (fat segments of radius 2) reaches this far beyond the polygon
_MIN_PIXELS, _MAX_PIXELS = 60, 600  # a T covers about 255 pixels of a 96x96 frame
_MIN_IOU = 0.5


def nearest_colours(frame: np.ndarray) -> np.ndarray:
    """``[H, W]``: the row of :data:`PALETTE` nearest each pixel of a uint8 ``[H, W, 3]`` frame."""
    f = np.asarray(frame, dtype=np.float32).reshape(-1, 3)
    d = (f * f).sum(1)[:, None] - 2.0 * f @ PALETTE.T + (PALETTE * PALETTE).sum(1)[None]
    return d.argmin(1).reshape(frame.shape[:2])


def pixel_labels(frame: np.ndarray) -> np.ndarray:
    """``[96, 96]`` labels of a uint8 ``[96, 96, 3]`` frame: :data:`BLOCK`, :data:`UNKNOWN` (the
    agent, contact dots) or :data:`BACKGROUND` (white, goal, walls), by the nearest rendered colour."""
    return _LABELS[nearest_colours(frame)]


def _erode(mask):
    p, out = np.pad(mask, 1), np.ones_like(mask)
    for dy in range(3):
        for dx in range(3):
            out &= p[dy:dy + mask.shape[0], dx:dx + mask.shape[1]]
    return out


def _dilate(mask):
    p, out = np.pad(mask, 1), np.zeros_like(mask)
    for dy in range(3):
        for dx in range(3):
            out |= p[dy:dy + mask.shape[0], dx:dx + mask.shape[1]]
    return out


def t_signed_distance(pose, x, y) -> np.ndarray:
    """Signed distance (canvas units, negative inside) from points ``(x, y)`` to the T at ``pose``."""
    px, py, angle = pose
    c, s = np.cos(angle), np.sin(angle)
    dx, dy = x - px, y - py
    u, v = c * dx + s * dy, -s * dx + c * dy
    out = None
    for cu, cv, hu, hv in T_RECTS:
        qx, qy = np.abs(u - cu) - hu, np.abs(v - cv) - hv
        d = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0)
        out = d if out is None else np.minimum(out, d)
    return out


def t_polygons(pose) -> list[np.ndarray]:
    """The T's two rectangles at ``pose`` (``(x, y, angle)`` as gym-pusht's ``info["block_pose"]``),
    each ``[4, 2]`` counter-clockwise in canvas coordinates."""
    px, py, angle = pose
    c, s = np.cos(angle), np.sin(angle)
    out = []
    for cu, cv, hu, hv in T_RECTS:
        corners = np.array([(cu - hu, cv - hv), (cu + hu, cv - hv), (cu + hu, cv + hv), (cu - hu, cv + hv)])
        out.append(np.stack([px + c * corners[:, 0] - s * corners[:, 1], py + s * corners[:, 0] + c * corners[:, 1]], 1))
    return out


def _clip(subject: list, clipper: np.ndarray) -> list:
    """Sutherland-Hodgman: ``subject`` (a convex polygon, list of points) clipped by convex ``clipper``."""
    out = subject
    n = len(clipper)
    orientation = np.sign(_signed_area(clipper))
    for i in range(n):
        if not out:
            break
        ax, ay = clipper[i]
        bx, by = clipper[(i + 1) % n]
        inp, out = out, []
        side = [orientation * ((bx - ax) * (py - ay) - (by - ay) * (px - ax)) for px, py in inp]
        for j in range(len(inp)):
            p, q, sp, sq = inp[j - 1], inp[j], side[j - 1], side[j]
            if sq >= 0:
                if sp < 0:
                    out.append(_cut(p, q, sp, sq))
                out.append(q)
            elif sp >= 0:
                out.append(_cut(p, q, sp, sq))
    return out


def _cut(p, q, sp, sq):
    t = sp / (sp - sq)
    return (p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]))


def _signed_area(poly) -> float:
    p = np.asarray(poly, dtype=np.float64)
    if len(p) < 3:
        return 0.0
    return 0.5 * float(np.dot(p[:, 0], np.roll(p[:, 1], -1)) - np.dot(p[:, 1], np.roll(p[:, 0], -1)))


_GOAL_RECTS = t_polygons(GOAL_POSE)


def coverage_of_pose(pose) -> float:
    """gym-pusht's coverage of a block at ``pose``: area(T at pose & goal T) / area(goal T), exact
    (the rectangles of each T do not overlap, so the intersection is the sum over rectangle pairs)."""
    total = sum(abs(_signed_area(_clip([tuple(p) for p in rect], goal)))
                for rect in t_polygons(pose) for goal in _GOAL_RECTS)
    return float(min(max(total / T_AREA, 0.0), 1.0))


def _fit_smooth(labels: np.ndarray, body: np.ndarray) -> tuple[np.ndarray, float]:
    """Stage 2: the pose whose soft, outline-dilated T template best matches the block pixels
    (Levenberg-Marquardt from the best of four starts from the moments of ``body``, the opened
    block mask), and the hard template's IoU with the block pixels."""
    block = (labels == BLOCK) & _dilate(body)  # stray block-coloured pixels (agent rims) left out
    ys, xs = np.nonzero(body)
    x, y = _X[ys, xs], _Y[ys, xs]
    cx, cy = x.mean(), y.mean()
    _, vectors = np.linalg.eigh(np.cov(np.stack([x - cx, y - cy])))
    major = vectors[:, 1]  # the T's long axis (its v axis: bar to stem), up to sign
    window = (np.abs(_X - cx) < 120) & (np.abs(_Y - cy) < 120) & (labels != UNKNOWN)
    window &= ~((labels == BLOCK) & ~block)
    wx, wy, observed = _X[window], _Y[window], block[window].astype(np.float64)

    def residual(pose, tau):
        z = np.clip((t_signed_distance(pose, wx, wy) - _DILATE) / tau, -50, 50)
        return 1.0 / (1.0 + np.exp(z)) - observed

    starts = []
    for sign in (1.0, -1.0):
        for turn in (0.0, np.pi / 2):
            angle = np.arctan2(-sign * major[0], sign * major[1]) + turn  # v axis = (-sin, cos)
            starts.append(np.array([cx + np.sin(angle) * T_CENTROID_V, cy - np.cos(angle) * T_CENTROID_V, angle]))
    pose = min(starts, key=lambda p: float((residual(p, 1.0) ** 2).sum()))
    eps = np.array([0.5, 0.5, 0.005])
    for tau in (1.0, 0.5):
        damping, r = 1e-3, residual(pose, tau)
        cost = float(r @ r)
        for _ in range(12):
            jac = np.stack([(residual(pose + e, tau) - r) / e[i] for i, e in enumerate(np.diag(eps))], 1)
            h, g = jac.T @ jac, jac.T @ r
            step = -np.linalg.solve(h + damping * np.diag(np.diag(h)) + 1e-9 * np.eye(3), g)
            trial = residual(pose + step, tau)
            if float(trial @ trial) < cost:
                pose, r, cost, damping = pose + step, trial, float(trial @ trial), damping * 0.3
                if np.abs(step[:2]).max() < 0.05 and abs(step[2]) < 5e-4:
                    break
            else:
                damping *= 10.0
    template = t_signed_distance(pose, wx, wy) < _DILATE
    iou = float((template & (observed > 0)).sum() / max(1, (template | (observed > 0)).sum()))
    return pose, iou


class _Renderer:
    """gym-pusht's own drawing of the T (``DrawOptions.draw_polygon`` over the goal), sampled at
    chosen output pixels exactly as ``cv2.resize`` samples the canvas (bit for bit)."""

    def __init__(self):
        import os

        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        import pygame
        from gym_pusht.envs.pymunk_override import DrawOptions
        from pymunk.space_debug_draw_options import SpaceDebugColor

        self.pygame = pygame
        self.color = SpaceDebugColor(*pygame.Color("LightSlateGray"))
        self.background = pygame.Surface((CANVAS, CANVAS))
        self.background.fill(WHITE)
        for rect in self._vertices(GOAL_POSE):
            pygame.draw.polygon(self.background, pygame.Color("LightGreen"), [(round(x), round(y)) for x, y in rect])
        self.surface = pygame.Surface((CANVAS, CANVAS))
        self.options = DrawOptions(self.surface)
        source = (np.arange(SIZE) + 0.5) * (CANVAS / SIZE) - 0.5
        low = np.floor(source).astype(np.int64)
        self.i0, self.i1 = np.clip(low, 0, CANVAS - 1), np.clip(low + 1, 0, CANVAS - 1)
        self.w1 = np.round((source - low) * 2048).astype(np.int64)  # cv2's 11-bit interpolation weights
        self.w0 = 2048 - self.w1

    @staticmethod
    def _vertices(pose):
        """The T's shapes as gym-pusht builds them (``add_tee``'s vertex order), at ``pose``."""
        c, s = np.cos(pose[2]), np.sin(pose[2])
        shapes = [[(-60, 30), (60, 30), (60, 0), (-60, 0)], [(-15, 30), (-15, 120), (15, 120), (15, 30)]]
        return [[(pose[0] + c * u - s * v, pose[1] + s * u + c * v) for u, v in shape] for shape in shapes]

    def __call__(self, pose, rows, cols) -> np.ndarray:
        self.surface.blit(self.background, (0, 0))
        for vertices in self._vertices(pose):
            self.options.draw_polygon(vertices, 0, self.color, self.color)
        view = self.pygame.surfarray.pixels3d(self.surface)  # [x, y, 3], locks the surface until deleted
        try:
            r0, r1, c0, c1 = self.i0[rows], self.i1[rows], self.i0[cols], self.i1[cols]
            b0, b1 = self.w0[cols][:, None], self.w1[cols][:, None]
            top = view[c0, r0].astype(np.int64) * b0 + view[c1, r0].astype(np.int64) * b1
            bottom = view[c0, r1].astype(np.int64) * b0 + view[c1, r1].astype(np.int64) * b1
        finally:
            del view
        # cv2's vertical pass on 8-bit images (its SIMD path, which the resize takes): bit for bit
        a0, a1 = self.w0[rows][:, None], self.w1[rows][:, None]
        return (((a0 * (top >> 4)) >> 16) + ((a1 * (bottom >> 4)) >> 16) + 2) >> 2


@functools.lru_cache(maxsize=1)
def _renderer() -> _Renderer | None:
    try:
        return _Renderer()
    except ImportError:
        return None


def _refine_exact(frame: np.ndarray, labels: np.ndarray, pose: np.ndarray, renderer: _Renderer,
                  max_renders: int = 80) -> np.ndarray:
    """Stage 3: a pattern search over (centroid x, centroid y, angle) from ``pose``, minimising the
    L1 colour difference between the frame and gym-pusht's rendering of the T (agent and border
    pixels excluded), steps from 1 canvas unit (and 1/90 rad) down to 1/8."""
    valid = ~_dilate(labels == UNKNOWN)
    valid[:2], valid[-2:], valid[:, :2], valid[:, -2:] = False, False, False, False  # the walls
    c, s = np.cos(pose[2]), np.sin(pose[2])
    centre = np.array([pose[0] - s * T_CENTROID_V, pose[1] + c * T_CENTROID_V, pose[2]])
    near = (np.abs(_X - centre[0]) < 110) & (np.abs(_Y - centre[1]) < 110)
    rows, cols = np.nonzero(valid & (near | _dilate(_dilate(labels == BLOCK))))
    observed = frame[rows, cols].astype(np.int64)

    def to_pose(q):
        return np.array([q[0] + np.sin(q[2]) * T_CENTROID_V, q[1] - np.cos(q[2]) * T_CENTROID_V, q[2]])

    def loss(q):
        return int(np.abs(renderer(to_pose(q), rows, cols) - observed).sum())

    cost, renders = loss(centre), 1
    step = np.array([1.0, 1.0, 1.0 / 90.0])
    axes = [np.eye(3)[i] * sign for i in range(3) for sign in (1, -1)]
    diagonals = [np.eye(3)[i] * si + np.eye(3)[j] * sj for i in range(3) for j in range(i + 1, 3)
                 for si in (1, -1) for sj in (1, -1)]
    while step[0] >= 0.125 and cost > 0 and renders < max_renders:
        for move in axes + diagonals:
            trial = loss(centre + move * step)
            renders += 1
            if trial < cost:
                centre, cost = centre + move * step, trial
                break
        else:
            step = step / 2
    return to_pose(centre)


def block_pose(frame: np.ndarray, exact: bool | None = None) -> np.ndarray | None:
    """The T block's pose ``(x, y, angle)`` (gym-pusht's ``block_pose`` convention) fitted to a uint8
    ``[96, 96, 3]`` frame, or None when the frame shows no recognisable T. ``exact``: refine with
    gym-pusht's renderer (None: when it is importable)."""
    frame = np.asarray(frame)
    if frame.shape != (SIZE, SIZE, 3):
        raise ValueError(f"frame has shape {frame.shape}; expected ({SIZE}, {SIZE}, 3) (gym-pusht's pixels)")
    labels = pixel_labels(frame)
    body = _dilate(_erode(labels == BLOCK))
    if not _MIN_PIXELS <= body.sum() <= _MAX_PIXELS:
        return None
    pose, iou = _fit_smooth(labels, body)
    if iou < _MIN_IOU:
        return None
    renderer = _renderer() if exact is not False else None
    if exact and renderer is None:
        raise ImportError(f"exact=True needs gym-pusht's renderer: {PUSHT_INSTALL}")
    if renderer is not None and coverage_of_pose(pose) > 0:  # far from the goal the coverage is 0 either way
        pose = _refine_exact(frame, labels, pose, renderer)
    pose[2] = (pose[2] + np.pi) % (2 * np.pi) - np.pi
    return pose


def frame_coverage(frame: np.ndarray, exact: bool | None = None) -> float:
    """gym-pusht's coverage read from a uint8 ``[96, 96, 3]`` frame (0 without a recognisable T)."""
    pose = block_pose(frame, exact)
    return 0.0 if pose is None else coverage_of_pose(pose)


def chunk_coverages(frames: np.ndarray, exact: bool | None = None) -> np.ndarray:
    """:func:`frame_coverage` of each frame of ``[k, 96, 96, 3]``."""
    return np.array([frame_coverage(frame, exact) for frame in frames], dtype=np.float64)


def block_centre(frame: np.ndarray) -> tuple[float, float] | None:
    """The T block's area centroid ``(x, y)`` in frame pixels (the smooth fit), or None without a T."""
    pose = block_pose(frame, exact=False)
    if pose is None:
        return None
    x, y, angle = pose
    scale = SIZE / CANVAS
    return (x - np.sin(angle) * T_CENTROID_V) * scale, (y + np.cos(angle) * T_CENTROID_V) * scale


def mass_centre(mask: np.ndarray) -> np.ndarray | None:
    """The mean ``(x, y)`` of a mask's pixels in canvas units (the canvas point each pixel samples, as
    gym-pusht's resize maps them), None for fewer than 2 pixels."""
    rows, cols = np.nonzero(mask)
    if rows.size < 2:
        return None
    return (np.array([cols.mean(), rows.mean()]) + 0.5) * (CANVAS / SIZE) - 0.5


def agent_position(frame: np.ndarray) -> np.ndarray | None:
    """The agent's centre in gym-pusht's 512x512 canvas units: the mass of a uint8 ``[96, 96, 3]``
    frame's pixels nearest the agent's colours (:func:`nearest_colours`),
    None with fewer than 2 such pixels. A mass, not a fitted disc, so that a blurred imagined agent
    still has a position."""
    return mass_centre(np.isin(nearest_colours(frame), AGENT_INDICES))


def point_error(a, b) -> float:
    """Distance in frame pixels between two points ``(x, y)`` read from two frames: 0 where neither
    frame has one, the frame's diagonal where one does not (the error stays finite)."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else float(np.hypot(SIZE, SIZE))
    return float(np.hypot(a[0] - b[0], a[1] - b[1]))


def block_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """Distance in pixels between the block centroids of two frames (an ``error_fn`` for
    :mod:`cosmos3_gym.world.harness`): 0 where neither shows a T, the frame's diagonal where one does not."""
    return point_error(block_centre(imagined), block_centre(true))


class GymPushTMissing(ImportError, ValueError):
    """gym-pusht is not installed: an ImportError for code that makes an env, and a ValueError for a
    command's flag checks (``train.args.parse_args`` turns those into a usage error, exit 2)."""


def require_gym_pusht(what: str = "PushT") -> None:
    """:class:`GymPushTMissing`, naming ``what`` and the install command, where gym-pusht is missing
    (looked up without importing it, so a command can check before it loads anything)."""
    from importlib import util

    if util.find_spec("gym_pusht") is None:
        raise GymPushTMissing(f"{what} needs gym-pusht: {PUSHT_INSTALL}")


def make_pusht(**kwargs):
    """gym-pusht's ``PushTEnv`` with pixel observations (unwrapped: no TimeLimit, no checkers), headless
    (``SDL_VIDEODRIVER=dummy`` unless set)."""
    import os

    import inspect

    require_gym_pusht()
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    from gym_pusht.envs import PushTEnv

    fixed = ("self", "obs_type", "render_mode", "observation_width", "observation_height")
    allowed = [name for name in inspect.signature(PushTEnv.__init__).parameters if name not in fixed]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"unknown keyword(s) {unknown}: PushT-Twin-v0 takes chunk, horizon and render_mode, and "
                        f"passes the rest to gym-pusht's PushTEnv, which takes {allowed} (the observation is "
                        "always obs_type='pixels' at 96x96, the space Cosmos3PushT-v0 imagines)")
    checked_pusht_keywords(kwargs)
    return PushTEnv(obs_type="pixels", render_mode="rgb_array", **kwargs)


def checked_pusht_keywords(kwargs: dict) -> None:
    """A ``ValueError`` for a value of gym-pusht's keywords that it would take and fail on later (pymunk
    aborts the whole process on a negative or NaN damping; a bad size fails when a frame is drawn)."""
    def finite(value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            return False
        try:
            return math.isfinite(float(value))
        except OverflowError:  # an int too large for a float
            return False

    damping = kwargs.get("damping")
    if damping is not None and not (finite(damping) and damping >= 0):
        raise ValueError(f"damping={damping!r} is invalid; use None (gym-pusht's default, 0) or a finite number "
                         ">= 0 (pymunk's space damping)")
    cog = kwargs.get("block_cog")
    if cog is not None and not (isinstance(cog, (tuple, list)) and len(cog) == 2
                                and all(finite(c) and abs(c) <= 512 for c in cog)):
        raise ValueError(f"block_cog={cog!r} is invalid; use None (the block's own centre of gravity) or a tuple of "
                         "two numbers (x, y) in the block's frame, within the board's 512 units")
    for name in ("visualization_width", "visualization_height"):
        value = kwargs.get(name, 1)
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < 1:
            raise ValueError(f"{name}={value!r} is invalid; use an integer >= 1 (pixels of gym-pusht's "
                             "visualization; the observation stays 96x96)")


T_CENTER_OF_GRAVITY = np.array([0.0, 45.0])  # add_tee: the mean of its two shapes' centres of gravity


def reset_state(agent, pose) -> list[float]:
    """gym-pusht's ``options["reset_to_state"]`` that starts the block at ``pose`` exactly.

    ``PushTEnv._set_state`` sets the block's position, then its angle, which pymunk applies about the
    centre of gravity (the legacy order its docstring warns of), so the position is shifted first."""
    x, y, angle = (float(v) for v in pose)
    c, s = np.cos(angle), np.sin(angle)
    gx, gy = T_CENTER_OF_GRAVITY
    return [float(agent[0]), float(agent[1]), x - gx + c * gx - s * gy, y - gy + s * gx + c * gy, angle]


def pusht_reward(coverage: float, threshold: float = SUCCESS_THRESHOLD) -> float:
    """gym-pusht's per-step reward for a coverage: ``clip(coverage / threshold, 0, 1)``."""
    return float(np.clip(coverage / threshold, 0.0, 1.0))
