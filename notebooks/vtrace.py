# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # V-trace on a small tabular MDP
#
# This notebook checks the claims of Espeholt et al. 2018, *IMPALA* (arXiv:1802.01561), Sec. 4,
# against `ops.vtrace` on a random MDP small enough to compute everything exactly. Every claim is
# an `assert`, so a change to `ops.vtrace` that breaks one stops the run.
#
# For a trajectory drawn from the behaviour policy $\mu$, the $n$-step V-trace target of eq. (1) is
#
# $$v_s = V(x_s) + \sum_{t=s}^{s+n-1} \gamma^{t-s} \Big(\prod_{i=s}^{t-1} c_i\Big)\, \rho_t
#   \big(r_t + \gamma V(x_{t+1}) - V(x_t)\big),
#   \qquad \rho_t = \min\Big(\bar\rho, \tfrac{\pi(a_t|x_t)}{\mu(a_t|x_t)}\Big),
#   \quad c_i = \lambda \min\Big(\bar c, \tfrac{\pi(a_i|x_i)}{\mu(a_i|x_i)}\Big).$$
#
# `ops.vtrace` is time-major: `v_tm1[t]` is $V(x_t)$, `v_t[t]` is $V(x_{t+1})$, `rho_tm1[t]` the
# unclipped ratio, and `vs[0]` is the full $n$-step target of an unroll's first state.

# %%
import jax

# Float64 throughout: the exact checks below hold to ~1e-12, far below float32's resolution.
jax.config.update("jax_enable_x64", True)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import rlax  # noqa: E402

from ops.vtrace import vtrace  # noqa: E402

# %% [markdown]
# ## The MDP and the two policies
#
# Five states, three actions, random transitions $P(x'|x,a)$ and rewards $r(x,a)$, $\gamma = 0.9$.
# The target policy $\pi$ is a softmax of the optimal $Q$, so it is much better than the random
# behaviour policy $\mu$; both give every action positive probability, so every ratio
# $\pi/\mu$ is finite and non-zero.

# %%
rng = np.random.default_rng(0)
S, A, GAMMA = 5, 3, 0.9
P = rng.dirichlet(np.ones(S), size=(S, A))  # [S, A, S]: P[x, a, y] = P(y | x, a)
R = rng.normal(size=(S, A))  # [S, A]: the reward of taking a in x


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


q_star = np.zeros((S, A))
for _ in range(500):  # value iteration; 0.9**500 leaves nothing of the start
    q_star = R + GAMMA * P @ q_star.max(axis=1)
mu = softmax(0.5 * rng.normal(size=(S, A)))
pi = softmax(2.0 * q_star)
ratio = pi / mu  # [S, A]


def policy_value(policy):
    """V^policy = (I - gamma P_policy)^{-1} r_policy, exactly."""
    p_policy = np.einsum("xa,xay->xy", policy, P)
    return np.linalg.solve(np.eye(S) - GAMMA * p_policy, (policy * R).sum(axis=1))


def clipped_policy(rho_bar):
    """pi_rhobar(a|x), proportional to min(rho_bar mu(a|x), pi(a|x)) (Theorem 1)."""
    w = np.minimum(rho_bar * mu, pi)
    return w / w.sum(axis=1, keepdims=True)


V_MU, V_PI = policy_value(mu), policy_value(pi)
print("pi/mu ranges over", ratio.min().round(3), "...", ratio.max().round(3))
print("V^mu =", V_MU.round(3), "\nV^pi =", V_PI.round(3))

# %% [markdown]
# ## The operator, read off `ops.vtrace`
#
# The V-trace operator maps $V$ to the expected target, $\mathcal{R}V(x) = \mathbb{E}_\mu[v_s \mid
# x_s = x]$. With $n = 3$ there are only $S (A S)^3 = 16\,875$ unrolls, so the expectation is an
# exact sum: run `ops.vtrace` on all of them at once and weight by their probability under $\mu$.
# Since $v_s$ is affine in $V$, $\mathcal{R}V = b + MV$, and $b$ and the columns of $M$ come from
# one call with $V = 0$ and $V = e_j$ stacked on a trailing axis.
#
# In matrix form, with $D_\rho = \mathrm{diag}_x \sum_a \mu\rho$,
# $r_\rho(x) = \sum_a \mu\rho\, r(x,a)$, $P_\rho = \sum_a \mu\rho\, P_a$ and
# $C = \sum_a \mu c\, P_a$ (all per state $x$):
#
# $$\mathcal{R}V = V + \sum_{t=0}^{n-1} (\gamma C)^t
#   \big(r_\rho + \gamma P_\rho V - D_\rho V\big).$$
#
# The first cell below checks that the two agree to rounding.

# %%
N_STEPS = 3


def all_unrolls(n):
    """Every n-step unroll (x_0, a_0, x_1, ..., x_n) and its probability under mu given x_0."""
    axes = [np.arange(S)] + [np.arange(A), np.arange(S)] * n
    grid = [g.ravel() for g in np.meshgrid(*axes, indexing="ij")]
    x, a = np.stack(grid[0::2]), np.stack(grid[1::2])  # [n + 1, K], [n, K]
    prob = np.prod(mu[x[:-1], a] * P[x[:-1], a, x[1:]], axis=0)  # [K]
    return x, a, prob


UNROLLS = all_unrolls(N_STEPS)


def vtrace_operator(rho_bar, c_bar, lambda_=1.0):
    """(b, M) with E_mu[v_s | x_s] = b + M V for every V, from ops.vtrace on every unroll."""
    x, a, prob = UNROLLS
    basis = np.concatenate([np.zeros((1, S)), np.eye(S)])  # [S + 1, S]: V = 0, then V = e_j
    values = basis.T[x]  # [n + 1, K, S + 1]: values[t, k, j] is V_j(x_t) on unroll k
    shape = values[:-1].shape
    out = vtrace(values[:-1], values[1:],
                 np.broadcast_to(R[x[:-1], a][..., None], shape),
                 np.full(shape, GAMMA),
                 np.broadcast_to(ratio[x[:-1], a][..., None], shape),
                 lambda_=lambda_, clip_rho_threshold=rho_bar, clip_c_threshold=c_bar)
    expected = np.zeros((S, S + 1))
    np.add.at(expected, x[0], prob[:, None] * np.asarray(out.vs[0]))  # sum over unrolls per x_0
    return expected[:, 0], expected[:, 1:] - expected[:, :1]


def operator_matrices(rho_bar, c_bar, lambda_=1.0, n=N_STEPS):
    """(b, M) of the same operator in closed form; n=np.inf gives the infinite-horizon one."""
    rho, c = np.minimum(rho_bar, ratio), lambda_ * np.minimum(c_bar, ratio)
    r_rho = (mu * rho * R).sum(axis=1)
    p_rho = np.einsum("xa,xay->xy", mu * rho, P)
    big_c = np.einsum("xa,xay->xy", mu * c, P)
    if np.isinf(n):
        trace = np.linalg.inv(np.eye(S) - GAMMA * big_c)
    else:
        trace = sum(np.linalg.matrix_power(GAMMA * big_c, t) for t in range(n))
    return trace @ r_rho, np.eye(S) + trace @ (GAMMA * p_rho - np.diag((mu * rho).sum(axis=1)))


def fixed_point(b, m):
    return np.linalg.solve(np.eye(S) - m, b)


for rho_bar, c_bar, lam in [(1.0, 1.0, 1.0), (2.0, 0.5, 0.8), (np.inf, 1.0, 1.0)]:
    b, m = vtrace_operator(rho_bar, c_bar, lam)
    b_exact, m_exact = operator_matrices(rho_bar, c_bar, lam)
    np.testing.assert_allclose(b, b_exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m, m_exact, rtol=1e-12, atol=1e-12)
print("ops.vtrace's expected target equals the closed-form operator")

# %% [markdown]
# ## (a) $\bar\rho$ sets the fixed point
#
# Theorem 1 of the paper: for $\bar c \le \bar\rho$ the operator is a contraction whose fixed
# point is $V^{\pi_{\bar\rho}}$, the value of
#
# $$\pi_{\bar\rho}(a|x) = \frac{\min(\bar\rho\,\mu(a|x), \pi(a|x))}
#   {\sum_b \min(\bar\rho\,\mu(b|x), \pi(b|x))}.$$
#
# (At the fixed point $r_\rho + \gamma P_\rho V = D_\rho V$; dividing each row by
# $\sum_a \mu\rho = \sum_a \min(\bar\rho\mu, \pi)$ turns the weights $\mu\rho$ into
# $\pi_{\bar\rho}$.) So V-trace learns $V^\pi$ only once $\bar\rho \ge \max \pi/\mu$; below
# $\min \pi/\mu$ it learns $V^\mu$, and in between a policy between the two. Each fixed point below
# is solved from `ops.vtrace`'s operator, with $\bar c = \min(1, \bar\rho)$.

# %%
rho_bars = np.concatenate([np.geomspace(0.5 * ratio.min(), 2.0 * ratio.max(), 16), [np.inf]])
distances = {"V^mu": [], "V^pi": [], "V^pi_rhobar": []}
for rho_bar in rho_bars:
    v_fixed = fixed_point(*vtrace_operator(rho_bar, min(1.0, rho_bar)))
    v_clipped = policy_value(clipped_policy(rho_bar))
    np.testing.assert_allclose(v_fixed, v_clipped, rtol=1e-10, atol=1e-10)
    if rho_bar >= ratio.max():
        np.testing.assert_allclose(v_fixed, V_PI, rtol=1e-10, atol=1e-10)
    if rho_bar <= ratio.min():
        np.testing.assert_allclose(v_fixed, V_MU, rtol=1e-10, atol=1e-10)
    for name, target in [("V^mu", V_MU), ("V^pi", V_PI), ("V^pi_rhobar", v_clipped)]:
        distances[name].append(np.abs(v_fixed - target).max())
# In between, the fixed point is neither value (by a margin far above rounding).
between = (rho_bars > 1.5 * ratio.min()) & (rho_bars < 0.9 * ratio.max())
assert min(np.array(distances["V^pi"])[between].min(),
           np.array(distances["V^mu"])[between].min()) > 1e-2
# The infinite-horizon operator of Theorem 1 has the same fixed point as the 3-step one.
np.testing.assert_allclose(fixed_point(*operator_matrices(1.0, 1.0, n=np.inf)),
                           policy_value(clipped_policy(1.0)), rtol=1e-10, atol=1e-10)

x_plot = np.where(np.isinf(rho_bars), 4.0 * ratio.max(), rho_bars)  # draw rho_bar=inf at the right
fig, ax = plt.subplots(figsize=(7, 3.5))
for name, style, tex in [("V^mu", "o-", r"V^{\mu}"), ("V^pi", "s-", r"V^{\pi}"),
                        ("V^pi_rhobar", "^-", r"V^{\pi_{\bar\rho}}")]:
    ax.plot(x_plot, np.maximum(distances[name], 1e-16), style, ms=4,
            label=rf"$\|V_{{fixed}} - {tex}\|_\infty$")
for r, label in [(ratio.min(), r"$\min\ \pi/\mu$"), (ratio.max(), r"$\max\ \pi/\mu$")]:
    ax.axvline(r, color="grey", ls=":")
    ax.text(r * 1.1, 1e-8, label, rotation=90, va="center", ha="left", color="grey")
ax.set(xscale="log", yscale="log", xlabel=r"$\bar\rho$ (rightmost point: $\infty$)",
       ylabel="sup distance (floored at 1e-16)", title=r"Fixed point of V-trace against $\bar\rho$")
ax.legend(loc="center")
plt.show()

# %% [markdown]
# ## (b) $\bar c$ sets the speed and the variance, not the fixed point
#
# With $\bar\rho$ fixed, $\bar c$ appears only in $C$. For $\bar c \le \bar\rho$ and
# $\lambda \le 1$,
# $M = \sum_{t<n}(\gamma C)^t\,[(I - D_\rho) + \gamma(P_\rho - C)] + (\gamma C)^n$
# is entrywise non-negative, so the contraction factor is its largest row sum,
#
# $$\eta = \|M\|_\infty
#   = 1 - (1-\gamma) \min_x \Big[\sum_{t<n} (\gamma C)^t D_\rho \mathbf{1}\Big](x),$$
#
# which can only shrink as $\bar c$ (so $C$) grows: larger $\bar c$ contracts faster (the $\eta$
# of Theorem 1 is this one with $n = \infty$).
#
# The cost is variance. At the fixed point every TD error has conditional mean zero, so the
# cross terms vanish and
# $\mathrm{Var}[v_s \mid x_s] = \mathbb{E}[\delta_s^2 \mid x_s] + \gamma^2 \mathbb{E}[c_s^2\,
# \mathrm{Var}[v_{s+1} \mid x_{s+1}] \mid x_s]$: no term falls as $\bar c$ grows. Below, the exact
# variance comes from that recursion, and the sampled one from `ops.vtrace` on 10-step unrolls
# drawn under $\mu$ (the same unrolls for every $\bar c$).

# %%
RHO_BAR = 1.0
C_BARS = [0.0, 0.25, 0.5, 0.75, 1.0]
V_FIXED = policy_value(clipped_policy(RHO_BAR))


def sample_unrolls(policy, starts, n, rng):
    """States [n + 1, K] and actions [n, K] of n-step unrolls under `policy` from `starts`."""
    x = np.empty((n + 1, len(starts)), int)
    a = np.empty((n, len(starts)), int)
    x[0] = starts
    for t in range(n):
        u = rng.random((2, len(starts), 1))
        a[t] = np.minimum((u[0] > np.cumsum(policy[x[t]], axis=1)).sum(axis=1), A - 1)
        x[t + 1] = np.minimum((u[1] > np.cumsum(P[x[t], a[t]], axis=1)).sum(axis=1), S - 1)
    return x, a


def vtrace_inputs(x, a, values, ratios):
    """v_tm1, v_t, r_t, discount_t, rho_tm1 of unrolls (x, a) for a value table."""
    return values[x[:-1]], values[x[1:]], R[x[:-1], a], np.full(a.shape, GAMMA), ratios[x[:-1], a]


def exact_target_variance(values, rho_bar, c_bar, n, lambda_=1.0):
    """Var[v_s | x_s] of the n-step target, by the backward recursion over steps to go."""
    rho, c = np.minimum(rho_bar, ratio), lambda_ * np.minimum(c_bar, ratio)
    delta = rho[..., None] * (R[..., None] + GAMMA * values - values[:, None, None])  # [x, a, y]
    weight = mu[..., None] * P  # probability of (a, y) given x
    mean, second = np.zeros(S), np.zeros(S)  # moments of the correction v_s - V(x_s)
    for _ in range(n):
        gc = GAMMA * c[..., None]  # [x, a, 1]; mean and second are of the next state y
        new_mean = (weight * (delta + gc * mean)).sum(axis=(1, 2))
        second = (weight * (delta**2 + 2 * gc * delta * mean + gc**2 * second)).sum(axis=(1, 2))
        mean = new_mean
    return second - mean**2


N_VAR, PER_STATE = 10, 10_000
x_s, a_s = sample_unrolls(mu, np.repeat(np.arange(S), PER_STATE), N_VAR, np.random.default_rng(1))
rows = []
for c_bar in C_BARS:
    b, m = vtrace_operator(RHO_BAR, c_bar)
    np.testing.assert_allclose(fixed_point(b, m), V_FIXED, rtol=1e-10, atol=1e-10)
    assert m.min() >= 0.0
    targets = np.asarray(vtrace(*vtrace_inputs(x_s, a_s, V_FIXED, ratio),
                                clip_rho_threshold=RHO_BAR, clip_c_threshold=c_bar).vs[0])
    targets = targets.reshape(S, PER_STATE)  # [start state, sample]
    # Sampled targets are unbiased at the fixed point: their mean is V within 5 standard errors.
    std_err = targets.std(axis=1) / np.sqrt(PER_STATE)
    assert np.all(np.abs(targets.mean(axis=1) - V_FIXED) < 5 * std_err + 1e-12)
    rows.append(dict(c_bar=c_bar, eta=np.abs(m).sum(axis=1).max(), b=b, m=m,
                     exact_var=exact_target_variance(V_FIXED, RHO_BAR, c_bar, N_VAR),
                     sampled_var=targets.var(axis=1)))

etas = np.array([row["eta"] for row in rows])
exact_var = np.array([row["exact_var"] for row in rows])  # [c_bar, x]
sampled_var = np.array([row["sampled_var"] for row in rows])
assert np.all(np.diff(etas) < 0), "larger c_bar must contract strictly faster"
assert np.all(np.diff(exact_var, axis=0) >= -1e-12), "variance must not fall as c_bar grows"
assert np.all(np.diff(exact_var.mean(axis=1)) > 0)
np.testing.assert_allclose(sampled_var, exact_var, rtol=0.1)  # 10,000 samples: a few % off
assert np.all(np.diff(sampled_var.mean(axis=1)) > 0)
for row in rows:
    print(f"c_bar={row['c_bar']:.2f}  eta={row['eta']:.4f}  "
          f"Var[v_s] exact={row['exact_var'].mean():.3f} sampled={row['sampled_var'].mean():.3f}")

fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
axes[0].plot(C_BARS, etas, "o-")
axes[0].set(xlabel=r"$\bar c$", ylabel=r"$\eta = \|M\|_\infty$", title="Contraction factor")
for row in rows:  # iterate V <- b + M V from V = 0
    v, gaps = np.zeros(S), []
    for _ in range(150):
        v = row["b"] + row["m"] @ v
        gaps.append(np.abs(v - V_FIXED).max())
    axes[1].semilogy(gaps, label=f"c_bar={row['c_bar']}")
axes[1].set(xlabel="operator applications", ylabel=r"$\|V_k - V^{\pi_{\bar\rho}}\|_\infty$",
            title="Same fixed point, different speed")
axes[1].legend()
axes[2].plot(C_BARS, exact_var.mean(axis=1), "-", label="exact")
axes[2].plot(C_BARS, sampled_var.mean(axis=1), "o", label="ops.vtrace, sampled")
axes[2].set(xlabel=r"$\bar c$", ylabel="Var[$v_s$], mean over states",
            title=f"Variance of {N_VAR}-step targets")
axes[2].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## (c) $\lambda$, the on-policy case, and episode ends
#
# **$\lambda$** (Remark 2 of the paper) multiplies every $c_i$, so it acts like $\bar c$: the
# fixed point stays, the contraction slows and the variance falls as $\lambda$ shrinks. At
# $\lambda = 0$ the target is one step: $v_s = V(x_s) + \rho_s(r_s + \gamma V(x_{s+1}) - V(x_s))$.

# %%
lambdas = [0.0, 0.5, 0.9, 1.0]
lam_etas, lam_vars = [], []
for lam in lambdas:
    b, m = vtrace_operator(RHO_BAR, 1.0, lambda_=lam)
    np.testing.assert_allclose(fixed_point(b, m), V_FIXED, rtol=1e-10, atol=1e-10)
    lam_etas.append(np.abs(m).sum(axis=1).max())
    lam_vars.append(exact_target_variance(V_FIXED, RHO_BAR, 1.0, N_VAR, lambda_=lam).mean())
assert np.all(np.diff(lam_etas) < 0) and np.all(np.diff(lam_vars) > 0)
print("lambda:", lambdas, "\neta:   ", np.round(lam_etas, 4), "\nVar:   ", np.round(lam_vars, 3))

v_tm1, v_t, r_t, discount_t, rho_tm1 = vtrace_inputs(x_s[:, :8], a_s[:, :8], V_MU, ratio)
one_step = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_=0.0).vs
np.testing.assert_allclose(
    one_step, v_tm1 + np.minimum(1.0, rho_tm1) * (r_t + discount_t * v_t - v_tm1), rtol=1e-12)

# %% [markdown]
# **On-policy** ($\mu = \pi$, so every ratio is 1, with $\bar c \ge 1$ and $\bar\rho \ge 1$): all
# $c_i = \rho_t = 1$ and eq. (1) telescopes to the $n$-step Bellman target (Sec. 4.1),
#
# $$v_s = \sum_{t=s}^{s+n-1} \gamma^{t-s} r_t + \gamma^{n} V(x_{s+n}).$$

# %%
def n_step_returns(r_t, discount_t, bootstrap):
    """Returns of every step of an unroll, bootstrapped from `bootstrap` after its last step."""
    out, g = np.empty_like(r_t), bootstrap
    for t in reversed(range(len(r_t))):
        g = r_t[t] + discount_t[t] * g
        out[t] = g
    return out


x_on, a_on = sample_unrolls(pi, np.arange(S), 6, np.random.default_rng(2))
v_tm1, v_t, r_t, discount_t, _ = vtrace_inputs(x_on, a_on, V_MU, ratio)  # any V will do
on_policy = vtrace(v_tm1, v_t, r_t, discount_t, np.ones_like(r_t)).vs
np.testing.assert_allclose(on_policy, n_step_returns(r_t, discount_t, v_t[-1]), rtol=1e-12)
print("on-policy targets = n-step returns, e.g.", np.asarray(on_policy[:, 0]).round(3))

# %% [markdown]
# **Episode ends inside an unroll.** Below, an unroll of 8 steps holds the last 4 steps of one
# episode and the first 4 of the next. Its step $k = 3$ ends the first episode:
#
# - *termination*: `discount_t[k] = 0`, so the return stops:
#   $v_s = \sum_{t=s}^{k} \gamma^{t-s} r_t$;
# - *truncation* (a time limit): `discount_t[k]` $= \gamma$ and `v_t[k]` is the value of the state
#   the episode was cut at, so $v_s = \sum_{t=s}^{k}\gamma^{t-s} r_t + \gamma^{k+1-s} V(x_{cut})$;
#   `episode_end_t[k] = True` stops the trace there, because row $k+1$ already belongs to the
#   next episode.

# %%
K_END, V_EP = 3, V_PI
rng_ep = np.random.default_rng(3)
ep1, ep2 = sample_unrolls(pi, [0], K_END + 1, rng_ep), sample_unrolls(pi, [2], 4, rng_ep)
v_tm1, v_t, r_t, discount_t, rho_tm1 = (
    np.concatenate(parts)[:, 0] for parts in zip(vtrace_inputs(*ep1, V_EP, ratio),
                                                  vtrace_inputs(*ep2, V_EP, ratio)))
ones = np.ones_like(r_t)
first, second = slice(0, K_END + 1), slice(K_END + 1, None)
ends = np.arange(len(r_t)) == K_END
assert v_t[K_END] != v_tm1[K_END + 1]  # the cut state and the next episode's first state differ

terminated = vtrace(v_tm1, v_t, r_t, np.where(ends, 0.0, discount_t), ones).vs
np.testing.assert_allclose(terminated[first], n_step_returns(r_t[first], discount_t[first], 0.0))

truncated = vtrace(v_tm1, v_t, r_t, discount_t, ones, episode_end_t=ends).vs
np.testing.assert_allclose(truncated[first],
                           n_step_returns(r_t[first], discount_t[first], v_t[K_END]))
for vs in (terminated, truncated):  # the next episode's targets are its own n-step returns
    np.testing.assert_allclose(vs[second], n_step_returns(r_t[second], discount_t[second], v_t[-1]))

# Without episode_end_t the truncated episode's targets run on into the next episode's rewards.
leaked = vtrace(v_tm1, v_t, r_t, discount_t, ones).vs
assert np.all(np.abs(leaked[first] - truncated[first]) > 1e-6)
print("truncated targets       ", np.asarray(truncated[first]).round(3))
print("same, no episode_end_t  ", np.asarray(leaked[first]).round(3))

# Off-policy too, ends split the unroll into independent pieces.
joint = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, clip_c_threshold=0.8, episode_end_t=ends)
for part in (first, second):
    alone = vtrace(v_tm1[part], v_t[part], r_t[part], discount_t[part], rho_tm1[part],
                   clip_c_threshold=0.8)
    np.testing.assert_allclose(joint.vs[part], alone.vs, rtol=1e-12)
    np.testing.assert_allclose(joint.pg_advantages[part], alone.pg_advantages, rtol=1e-12)

# %% [markdown]
# ## (d) Against `rlax.vtrace`
#
# `rlax.vtrace` returns the errors $v_s - V(x_s)$ of rank-1 `[T]` inputs (so a batch needs
# `jax.vmap`), and `rlax.vtrace_td_error_and_advantage` adds the policy-gradient advantage.
# With $\bar c = 1$, $\bar\rho \ge 1$ and contiguous unrolls the two agree for any $\lambda$.

# %%
x_d, a_d = sample_unrolls(mu, np.arange(S), 12, np.random.default_rng(4))
inputs = vtrace_inputs(x_d, a_d, V_MU, ratio)  # [12, 5]: contiguous unrolls under mu
# rlax takes [T]: map it over the batch axis (lambda_ and rho_bar shared), compiled once.
over_batch = dict(in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
rlax_errors = jax.jit(jax.vmap(rlax.vtrace, **over_batch))
rlax_both = jax.jit(jax.vmap(rlax.vtrace_td_error_and_advantage, **over_batch))

for rho_bar in [1.0, 2.0, np.inf]:
    for lam in [1.0, 0.9, 0.0]:
        ours = vtrace(*inputs, lambda_=lam, clip_rho_threshold=rho_bar, clip_c_threshold=1.0)
        np.testing.assert_allclose(ours.errors, rlax_errors(*inputs, lam, rho_bar), atol=1e-12)
        if lam == 1.0:
            np.testing.assert_allclose(ours.pg_advantages,
                                       rlax_both(*inputs, lam, rho_bar).pg_advantage, atol=1e-12)
print("c_bar = 1: errors agree for every rho_bar >= 1 and lambda; pg advantages for lambda = 1")

# %% [markdown]
# Where they differ, and why:
#
# 1. **$\bar c$.** rlax fixes $c_i = \lambda\min(1, \rho_i)$. Since $\bar c$ enters only through
#    $c_i$, a per-step $\lambda_i = \lambda\min(\bar c, \rho_i) / \min(1, \rho_i)$ makes rlax
#    compute `ops.vtrace`'s $\bar c$ targets; by (b) both have the same fixed point.
# 2. **$\bar\rho < 1$.** rlax still uses $\min(1, \rho_i)$ as the trace, i.e.
#    $\bar c = 1 > \bar\rho$, outside the paper's assumption $\bar\rho \ge \bar c$;
#    `ops.vtrace` refuses that pair (a per-step $\lambda > 1$ reproduces it).
# 3. **The advantage with $\lambda < 1$.** Sec. 4.2 uses $r_s + \gamma v_{s+1}$ with the V-trace
#    target $v_{s+1}$; `ops.vtrace` does exactly that. rlax bootstraps its Q estimate from
#    $\lambda v_{s+1} + (1-\lambda) V(x_{s+1})$, so the two agree only at $\lambda = 1$.

# %%
rho_bar, c_bar = 1.0, 0.5
ours = vtrace(*inputs, clip_rho_threshold=rho_bar, clip_c_threshold=c_bar)
assert not np.allclose(ours.errors, rlax_errors(*inputs, 1.0, rho_bar))
rho_tm1 = inputs[-1]
lambda_equiv = np.minimum(c_bar, rho_tm1) / np.minimum(1.0, rho_tm1)  # [T, B]
rlax_per_step = jax.vmap(rlax.vtrace, in_axes=(1, 1, 1, 1, 1, 1, None), out_axes=1)
np.testing.assert_allclose(ours.errors, rlax_per_step(*inputs, lambda_equiv, rho_bar), atol=1e-12)
print("c_bar=0.5: max |ops - rlax| =",
      np.abs(ours.errors - rlax_errors(*inputs, 1.0, rho_bar)).max(),
      "; 0 after rescaling rlax's lambda per step")

try:
    vtrace(*inputs, clip_rho_threshold=0.5, clip_c_threshold=1.0)
    raise AssertionError("ops.vtrace should refuse c_bar > rho_bar")
except ValueError as err:
    print("ops.vtrace(rho_bar=0.5, c_bar=1):", err)
np.testing.assert_allclose(  # ...which is what rlax computes for rho_bar = 0.5
    rlax_errors(*inputs, 1.0, 0.5),
    vtrace(*inputs, lambda_=np.minimum(1.0, rho_tm1) / np.minimum(0.5, rho_tm1),
           clip_rho_threshold=0.5, clip_c_threshold=0.5).errors, atol=1e-12)

lam = 0.5
ours = vtrace(*inputs, lambda_=lam)
theirs = rlax_both(*inputs, lam, 1.0).pg_advantage
v_tm1, v_t, r_t, discount_t, rho_tm1 = inputs
mixed_next = np.concatenate([lam * ours.vs[1:] + (1 - lam) * v_tm1[1:], v_t[-1:]])
np.testing.assert_allclose(
    theirs, np.minimum(1.0, rho_tm1) * (r_t + discount_t * mixed_next - v_tm1), atol=1e-12)
assert not np.allclose(ours.pg_advantages, theirs)
print("lambda=0.5: max |pg advantage difference| =", np.abs(ours.pg_advantages - theirs).max())

# %% [markdown]
# 4. **Episode ends.** A termination is `discount_t = 0` in both. rlax has no `episode_end_t`
#    (its `sample_mask`, meant for padding, skips a step and carries the later correction through
#    it unchanged); a zero $\lambda$ at the truncated step stops its trace and gives the same
#    targets. Its advantage, though, bootstraps from
#    `v_tm1[k + 1]`, the value of the *next episode's* first state, where `ops.vtrace` uses
#    `v_t[k]`, the value of the state the episode was cut at. On unrolls that hold a truncation
#    the advantages differ at that step by $\min(\bar\rho_{pg}, \rho_k)\,\gamma\,
#    (V(x_{cut}) - V(x'_0))$.

# %%
v_tm1, v_t, r_t, discount_t, rho_tm1 = (  # the two-episode unroll of (c), off-policy ratios
    np.concatenate(parts)[:, 0] for parts in zip(vtrace_inputs(*ep1, V_EP, ratio),
                                                  vtrace_inputs(*ep2, V_EP, ratio)))
ours = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, episode_end_t=ends)
theirs = rlax.vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho_tm1,
                                            lambda_=np.where(ends, 0.0, 1.0))
np.testing.assert_allclose(ours.errors, theirs.errors, atol=1e-12)
gap = np.asarray(ours.pg_advantages - theirs.pg_advantage)
next_first = np.roll(v_tm1, -1)  # v_tm1[k + 1]; the wrapped last entry is not an end
expected_gap = np.where(ends, np.minimum(1.0, rho_tm1) * discount_t * (v_t - next_first), 0.0)
np.testing.assert_allclose(gap, expected_gap, atol=1e-12)
assert abs(gap[K_END]) > 1e-6
print("truncation: targets agree; pg advantage differs only at the cut:", gap.round(4))

# %% [markdown]
# ## (e) Policy lag: what $\bar c = 1$ costs when $\pi$ has moved away from $\mu$
#
# Under lag the actors' $\mu$ is the learner's policy of some updates ago, and the learner's $\pi$
# has usually grown more certain since. Here the gap is a knob: $\mu_\kappa \propto
# \pi^{1-\kappa}\mu^{\kappa}$ (geometric mixing of the two policies above), from on-policy
# ($\kappa = 0$) to the random $\mu$ ($\kappa = 1$). For each gap, in closed form on the same
# MDP with unrolls of $n = 20$ steps (as IMPALA's):
#
# - the **trace product** $\mathbb{E}_{\mu}\big[\prod_{t<n} c_t\big]$ with
#   $c_t = \min(\bar c, \pi/\mu)$, averaged over start states: how much of an unroll V-trace's
#   targets still carry (the learner logs the same quantity on its batches as `trace_product`);
# - the **contraction factor** $\eta$ of the $n$-step V-trace operator, for $\bar c = \bar\rho
#   \in \{1, 2, 4, \infty\}$ (section (b): $\bar c$ sets the speed);
# - for comparison, the targets of no correction (every ratio 1, the value targets of `none`,
#   `epsilon` and `is_1step`): the $n$-step returns of $\mu$, which contract at $\gamma^n$
#   whatever the gap, towards $V^{\mu}$ instead of $V^{\pi}$.

# %%
N_LAG = 20


def lagged_behaviour(kappa):
    """mu_kappa proportional to pi^(1 - kappa) mu^kappa."""
    return softmax((1.0 - kappa) * np.log(pi) + kappa * np.log(mu))


def lag_operator(behaviour, rho_bar, c_bar, n=N_LAG, correct=True):
    """(b, M) of the n-step target operator for data from `behaviour`, target pi; with
    correct=False every ratio is 1 (no correction: n-step returns of the behaviour)."""
    r = pi / behaviour if correct else np.ones_like(pi)
    rho, c = np.minimum(rho_bar, r), np.minimum(c_bar, r)
    r_rho = (behaviour * rho * R).sum(axis=1)
    p_rho = np.einsum("xa,xay->xy", behaviour * rho, P)
    big_c = np.einsum("xa,xay->xy", behaviour * c, P)
    trace = sum(np.linalg.matrix_power(GAMMA * big_c, t) for t in range(n))
    m = np.eye(S) + trace @ (GAMMA * p_rho - np.diag((behaviour * rho).sum(axis=1)))
    return trace @ r_rho, m


def trace_product(behaviour, c_bar, n=N_LAG):
    """E_behaviour[prod_{t<n} min(c_bar, pi/behaviour)], the mean over start states."""
    c_matrix = np.einsum("xa,xay->xy", behaviour * np.minimum(c_bar, pi / behaviour), P)
    return np.linalg.matrix_power(c_matrix, n).sum(axis=1).mean()


kappas = np.linspace(0.0, 1.0, 11)
lag_c_bars = [1.0, 2.0, 4.0, np.inf]
kls, products, lag_etas, none_gap = [], [], {c: [] for c in lag_c_bars}, []
for kappa in kappas:
    behaviour = lagged_behaviour(kappa)
    kls.append((behaviour * np.log(behaviour / pi)).sum(axis=1).mean())
    products.append(trace_product(behaviour, 1.0))
    for c_bar in lag_c_bars:
        b, m = lag_operator(behaviour, c_bar, c_bar)
        assert m.min() >= -1e-12
        lag_etas[c_bar].append(np.abs(m).sum(axis=1).max())
    b, m = lag_operator(behaviour, np.inf, np.inf, correct=False)
    np.testing.assert_allclose(np.abs(m).sum(axis=1).max(), GAMMA**N_LAG, rtol=1e-9)
    np.testing.assert_allclose(fixed_point(b, m), policy_value(behaviour), rtol=1e-9, atol=1e-9)
    none_gap.append(np.abs(policy_value(behaviour) - V_PI).max())
kls, products = np.array(kls), np.array(products)
lag_etas = {c: np.array(e) for c, e in lag_etas.items()}

# On-policy every trace is 1 and V-trace contracts as fast as the n-step return.
np.testing.assert_allclose(products[0], 1.0, rtol=1e-9)
np.testing.assert_allclose(lag_etas[1.0][0], GAMMA**N_LAG, rtol=1e-6)
# The larger the gap, the less of an unroll the traces carry and the slower V-trace contracts;
# a larger c_bar never contracts slower, and as fast as the n-step return while no ratio
# reaches it (no trace is cut).
assert np.all(np.diff(kls) > 0) and np.all(np.diff(products) < 0)
assert np.all(np.diff(lag_etas[1.0]) > 0)
for low, high in zip(lag_c_bars, lag_c_bars[1:]):
    assert np.all(lag_etas[high] <= lag_etas[low] + 1e-12)
    assert np.all(lag_etas[high][-1] < lag_etas[low][-1]) or high == np.inf
np.testing.assert_allclose(lag_etas[np.inf], GAMMA**N_LAG, rtol=1e-6)
for kappa, kl, prod, eta in zip(kappas[::2], kls[::2], products[::2], lag_etas[1.0][::2]):
    print(f"kappa={kappa:.1f}  KL(mu||pi)={kl:.3f}  trace product={prod:.4f}  "
          f"eta(c_bar=1)={eta:.4f}  (gamma^n = {GAMMA**N_LAG:.4f}, one step: {GAMMA})")

# %% [markdown]
# Applied repeatedly from $V = 0$ (a value function that has not learned yet), the operators
# show the trade: V-trace with $\bar c = 1$ heads for $V^{\pi_{\bar\rho}}$ but, once its traces
# are cut, at close to one-step speed; uncorrected targets arrive fast, at the wrong place
# ($V^{\mu}$). Early in learning, speed can matter more than the fixed point.

# %%
behaviour = lagged_behaviour(1.0)
curves = {}
for name, (rho_bar, c_bar, correct) in {
        r"V-trace, $\bar c = \bar\rho = 1$": (1.0, 1.0, True),
        r"V-trace, $\bar c = \bar\rho = 4$": (4.0, 4.0, True),
        "no correction": (np.inf, np.inf, False)}.items():
    b, m = lag_operator(behaviour, rho_bar, c_bar, correct=correct)
    v, gaps = np.zeros(S), []
    for _ in range(30):
        v = b + m @ v
        gaps.append(np.abs(v - V_PI).max())
    curves[name] = np.array(gaps)
uncorrected, cut = curves["no correction"], curves[r"V-trace, $\bar c = \bar\rho = 1$"]
assert uncorrected[0] < cut[0] and cut[-1] < uncorrected[-1]  # fast and biased against slow

fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
axes[0].plot(kls, products, "o-")
axes[0].set(xlabel=r"KL($\mu\,\|\,\pi$), mean over states", yscale="log",
            ylabel=rf"E[$\prod_{{t<{N_LAG}}} c_t$], $\bar c = 1$", title="Traces under lag")
for c_bar in lag_c_bars:
    axes[1].plot(kls, lag_etas[c_bar], "o-", ms=3, label=rf"$\bar c = \bar\rho = {c_bar:g}$")
axes[1].axhline(GAMMA, color="grey", ls=":", label=r"one step ($\gamma$)")
axes[1].axhline(GAMMA**N_LAG, color="grey", ls="--", label=rf"$\gamma^{{{N_LAG}}}$ (no correction)")
axes[1].set(xlabel=r"KL($\mu\,\|\,\pi$)", ylabel=r"$\eta$", title="Contraction factor")
axes[1].legend(fontsize=8)
for name, gaps in curves.items():
    axes[2].semilogy(gaps, label=name)
axes[2].set(xlabel="operator applications", ylabel=r"$\|V_k - V^{\pi}\|_\infty$",
            title=r"From $V = 0$, largest gap ($\kappa = 1$)")
axes[2].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Choosing $\bar c$ under lag.** $\bar c$ (with $\bar\rho \ge \bar c$) does not move the fixed
# point, only the speed and the variance (section (b)). When the learner's logged
# `trace_product` is far below 1, its V-trace targets are a few steps long and learn at close to
# one-step TD speed: shorten the lag (refresh the actors' parameters more often, take smaller
# steps per update) or raise $\bar c$ and $\bar\rho$ together, paying in variance. The CartPole
# correction study in `docs/results/` measures both quantities per policy lag and learning rate.
