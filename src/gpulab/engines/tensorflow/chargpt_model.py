"""The ``chargpt`` model in Keras: torch's ``CharGPT`` layer for layer (pre-norm blocks, causal attention,
GELU MLP, GPT-2's N(0, 0.02) init, the output layer tied to the token embedding), so the two engines train
the same parameter count. Imported only when the recipe builds it (it imports Keras)."""

from __future__ import annotations

import keras

from gpulab.recipe_data import CharGptOptions

_INIT = keras.initializers.RandomNormal(stddev=0.02)


class Block(keras.layers.Layer):
    def __init__(self, o: CharGptOptions, **kwargs):
        super().__init__(**kwargs)
        self.ln1, self.ln2 = (
            keras.layers.LayerNormalization(epsilon=1e-5),
            keras.layers.LayerNormalization(epsilon=1e-5),
        )
        self.attn = keras.layers.MultiHeadAttention(
            o.n_head, o.n_embd // o.n_head, dropout=o.dropout, kernel_initializer=_INIT
        )
        self.fc = keras.layers.Dense(4 * o.n_embd, activation="gelu", kernel_initializer=_INIT)
        self.out = keras.layers.Dense(o.n_embd, kernel_initializer=_INIT)
        self.drop1, self.drop2 = keras.layers.Dropout(o.dropout), keras.layers.Dropout(o.dropout)

    def call(self, x, training=False):
        h = self.ln1(x)
        x = x + self.drop1(self.attn(h, h, use_causal_mask=True, training=training), training=training)
        return x + self.drop2(self.out(self.fc(self.ln2(x))), training=training)


class CharGPT(keras.Model):
    def __init__(self, vocab: int, o: CharGptOptions, **kwargs):
        super().__init__(**kwargs)
        self.tok = keras.layers.Embedding(vocab, o.n_embd, embeddings_initializer=_INIT)
        self.pos = keras.layers.Embedding(o.block_size, o.n_embd, embeddings_initializer=_INIT)
        self.blocks = [Block(o) for _ in range(o.n_layer)]
        self.ln = keras.layers.LayerNormalization(epsilon=1e-5)
        self.block_size = o.block_size
        self.build((None, o.block_size))

    def build(self, input_shape):
        x = keras.ops.zeros((1, self.block_size), dtype="int32")
        self.call(x)  # creates every layer's weights
        self.built = True

    def call(self, idx, training=False):
        positions = keras.ops.arange(keras.ops.shape(idx)[1])
        x = self.tok(idx) + self.pos(positions)[None]
        for block in self.blocks:
            x = block(x, training=training)
        x = self.ln(x)
        # Weight tying, as GPT-2 (and torch's recipe): logits against the token embedding, in float32.
        logits = keras.ops.matmul(x, keras.ops.transpose(keras.ops.cast(self.tok.embeddings, x.dtype)))
        return keras.ops.cast(logits, "float32")
