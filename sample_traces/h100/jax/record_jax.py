"""JAX on the GPU under jax.profiler (`python record_jax.py OUTDIR`): an MLP trained with a jitted step, float(loss) every
step (a host sync); `jax_cold` profiles the first 8 steps (compilation inside), `jax_sync` 8 steps after 3 warm ones."""
import os, sys, time
import jax, jax.numpy as jnp
out = sys.argv[1]
key = jax.random.PRNGKey(0)
W = [jax.random.normal(jax.random.fold_in(key, i), (2048, 2048)) * 0.02 for i in range(4)]
x = jax.random.normal(key, (1024, 2048)); y = jax.random.normal(jax.random.fold_in(key, 9), (1024, 2048))
def loss_fn(W, x, y):
    h = x
    for w in W:
        h = jax.nn.relu(h @ w)
    return jnp.mean((h - y) ** 2)
@jax.jit
def step(W, x, y):
    l, g = jax.value_and_grad(loss_fn)(W, x, y)
    return [w - 1e-3 * gw for w, gw in zip(W, g)], l
def run(n, name, warm):
    global W
    if warm:
        for _ in range(3):
            W, l = step(W, x, y); float(l)
    with jax.profiler.trace(os.path.join(out, name)):
        for i in range(n):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                W, l = step(W, x, y)
                float(l)  # host sync every step
run(8, "jax_cold", warm=False)   # first call compiles inside the window
run(8, "jax_sync", warm=True)
print(jax.devices())
