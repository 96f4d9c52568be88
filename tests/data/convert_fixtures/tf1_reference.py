"""The TensorFlow 1 fixture's reference logits, computed by TensorFlow from the bundle as Google's modeling.py does.

Run in a venv with tensorflow-cpu (not a zh-bert dependency), from this folder:
    python tf1_reference.py erf  tf1/reference_logits.npz       # modeling.py until 2019-02-07 (Chinese BERT)
    python tf1_reference.py tanh tf1/reference_logits_tanh.npz  # modeling.py since

Variables are read by TensorFlow's own checkpoint reader (`tf.train.load_checkpoint`); the probe is the one stored
in `hf/reference_logits.npz`. The forward follows modeling.py: embeddings (word + token type + position) then
LayerNorm over `tf.nn.moments` (epsilon 1e-12), attention scores / sqrt(head size) plus `(1 - mask) * -10000`,
`x @ kernel + bias` dense layers, `gelu` by the curve named, the MLM transform and
`transform @ word_embeddings^T + output_bias`, the pooler's tanh and the NSP `pooled @ output_weights^T + bias`.
"""

import json
import math
import sys

import numpy as np
import tensorflow as tf

CURVES = {
    "erf": lambda x: x * (0.5 * (1.0 + tf.math.erf(x / tf.sqrt(2.0)))),
    "tanh": lambda x: x * (0.5 * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))),
}


def main(curve: str, out: str) -> None:
    gelu = CURVES[curve]
    cfg = json.load(open("tf1/bert_config.json"))
    r = tf.train.load_checkpoint("tf1/bert_model.ckpt")
    v = lambda n: tf.constant(r.get_tensor(n))  # noqa: E731
    probe = np.load("hf/reference_logits.npz")
    ids, types, mask = (tf.constant(probe[k]) for k in ("input_ids", "token_type_ids", "attention_mask"))
    b, s = probe["input_ids"].shape
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    d = h // heads

    def norm(x, name):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-12) * v(f"{name}/gamma") + v(f"{name}/beta")

    def dense(x, name):
        return tf.matmul(x, v(f"{name}/kernel")) + v(f"{name}/bias")

    x = (tf.gather(v("bert/embeddings/word_embeddings"), ids) + tf.gather(v("bert/embeddings/token_type_embeddings"), types)
         + v("bert/embeddings/position_embeddings")[:s][None])
    x = norm(x, "bert/embeddings/LayerNorm")
    adder = (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{i}"
        split = lambda t: tf.transpose(tf.reshape(t, [b, s, heads, d]), [0, 2, 1, 3])  # noqa: E731
        q, k, val = (split(dense(x, f"{p}/attention/self/{n}")) for n in ("query", "key", "value"))
        probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / math.sqrt(d) + adder)
        ctx = tf.reshape(tf.transpose(tf.matmul(probs, val), [0, 2, 1, 3]), [b, s, h])
        x = norm(dense(ctx, f"{p}/attention/output/dense") + x, f"{p}/attention/output/LayerNorm")
        x = norm(dense(gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense") + x, f"{p}/output/LayerNorm")
    t = norm(gelu(dense(x, "cls/predictions/transform/dense")), "cls/predictions/transform/LayerNorm")
    mlm = tf.matmul(t, v("bert/embeddings/word_embeddings"), transpose_b=True) + v("cls/predictions/output_bias")
    pooled = tf.tanh(dense(x[:, 0], "bert/pooler/dense"))
    nsp = tf.matmul(pooled, v("cls/seq_relationship/output_weights"), transpose_b=True) + v("cls/seq_relationship/output_bias")
    np.savez(out, **{k: probe[k] for k in ("input_ids", "token_type_ids", "attention_mask")},
             mlm=mlm.numpy().astype(np.float32), nsp=nsp.numpy().astype(np.float32))


if __name__ == "__main__":
    main(*sys.argv[1:3])
