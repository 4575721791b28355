"""A tiny Keras LSTM trained with ``Model.fit``, no profiler code: ``traceinsight record`` adds its own callback.

    traceinsight record -- python examples/keras_tiny.py
    traceinsight record -- python examples/keras_tiny.py --activation relu   # the LSTM that cannot use cuDNN
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--activation", default="tanh")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    n = args.batch_size * args.batches
    x = rng.standard_normal((n, 16, 8)).astype("float32")
    y = rng.standard_normal((n, 1)).astype("float32")
    model = keras.Sequential([keras.Input((16, 8)), keras.layers.LSTM(32, activation=args.activation), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0)
    print("trained", args.batches, "batches")


if __name__ == "__main__":
    main()
