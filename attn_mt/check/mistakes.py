"""The common mistakes in the chapter's blocks, each with the sentence `attn-mt check` teaches on seeing it.

A mistake found by comparison moves one switch of `variants.Knobs` (or one of a few, `more_knobs`): a
learner's output equal to that variant's names it. The others have no knobs and are found by behaviour
instead: the two dropout mistakes (two eval calls that differ; a training call equal to an eval call),
a caller's input changed by the call, a backward pass that reaches no input, a constructor whose
layers have biases the book's do not, a layer or weight the module does not register, and the probes
of runner.py and blocks.py (a 2-D valid_lens that fails where a 1-D one runs, an init_state that
returns the encoder outputs as it got them, a positional encoding right only when the batch is as long
as the sequence, a Transformer decoder's init_state with fewer cache slots than blocks).

A mistake's title and lesson are English marked for the catalogues (`N_`), translated where the report
shows them; its id stays as it is in every language.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attn_mt.i18n import N_


@dataclass(frozen=True)
class Mistake:
    """One named mistake: its id, a short title, the teaching sentence and the switches it moves."""

    id: str
    title: str
    lesson: str
    knobs: dict[str, object] = field(default_factory=dict)
    more_knobs: tuple[dict[str, object], ...] = ()  # other ways to make the same mistake

    def knob_sets(self) -> tuple[dict[str, object], ...]:
        """Each set of switches that makes this mistake (none for a mistake found by behaviour)."""
        return (self.knobs, *self.more_knobs) if self.knobs else ()


MISTAKES = (
    Mistake(
        "mask-with-zero",
        N_("padding masked with 0 instead of a large negative number"),
        N_(
            "A masked score of 0 still gets exp(0) = 1 in the softmax, so padding keeps real weight; the "
            "book writes -1e6 over the masked scores so that exp() of them is 0."
        ),
        {"fill": "zero"},
    ),
    Mistake(
        "mask-with-minus-infinity",
        N_("padding masked with -inf"),
        N_(
            "With -inf a query whose valid length is 0 has every score at -inf, and softmax of that row is "
            "0/0 = NaN, which then spreads through the whole batch; the book's -1e6 (or a finite large "
            "negative) keeps it finite."
        ),
        {"fill": "neg_inf"},
    ),
    Mistake(
        "valid-lens-ignored",
        N_("valid_lens ignored: the padding is not masked"),
        N_(
            "Keys at or past a sequence's valid length are padding; the softmax must give them no weight, so "
            "mask them (scores at positions >= valid_len) before the softmax."
        ),
        {"fill": "none"},
    ),
    Mistake(
        "mask-inverted",
        N_("the mask is inverted: it hides the real keys and keeps the padding"),
        N_(
            "Keep the keys at positions < valid_len and mask those at positions >= valid_len; yours masks "
            "the first valid_len keys instead."
        ),
        {"inverted": True},
    ),
    Mistake(
        "mask-off-by-one",
        N_("the mask keeps one key too many (<= valid_len instead of < valid_len)"),
        N_(
            "Key j is real when j < valid_len (positions count from 0): with <= (or valid_len + 1) every row "
            "keeps its first padding key, and a valid length of 0 still attends to key 0."
        ),
        {"off_by_one": True},
    ),
    Mistake(
        "softmax-wrong-axis",
        N_("softmax over the wrong axis (the queries, not the keys)"),
        N_(
            "Each query's weights over the keys must sum to 1, so the softmax runs over the keys' axis: the "
            "last (dim=-1) of the (batch, queries, keys) scores, dim=1 of Nadaraya-Watson's (queries, keys)."
        ),
        {"axis": 1},
    ),
    Mistake(
        "valid-lens-wrong-axis",
        N_("1-D valid_lens spread over the wrong axis"),
        N_(
            "A 1-D valid_lens holds one length per sentence, and every query of sentence b uses "
            "valid_lens[b]: repeat each length in place once per query (torch.repeat_interleave(valid_lens, "
            "X.shape[1])) or broadcast it as valid_lens[:, None, None]; .repeat() tiles the whole list, and "
            "valid_lens[None, :, None] gives query q the length of sentence q."
        ),
        {"lens_1d": "tile"},
        ({"lens_1d": "query"},),
    ),
    Mistake(
        "valid-lens-2d-as-1d",
        N_("a 2-D valid_lens is handled as if it were 1-D"),
        N_(
            "valid_lens may also be (batch, queries), one length per query: the book flattens it with "
            "valid_lens.reshape(-1) (its else branch) instead of repeating it once per query as it does a "
            "1-D one; yours runs with a 1-D valid_lens and fails with a 2-D one."
        ),
    ),
    Mistake(
        "no-scaling",
        N_("no 1/sqrt(d) scaling of the dot products"),
        N_(
            "Dot products of d-dimensional vectors with unit-variance entries have variance d; dividing by "
            "sqrt(d) keeps the scores at unit scale so the softmax does not saturate (book eq. 11.3.4)."
        ),
        {"scale": "none"},
    ),
    Mistake(
        "scaled-by-d",
        N_("dot products divided by d instead of sqrt(d)"),
        N_(
            "The scaling is 1/sqrt(d), the standard deviation of a dot product of d unit-variance entries; "
            "dividing by d flattens the weights towards uniform as d grows."
        ),
        {"scale": "d"},
    ),
    Mistake(
        "heads-scaled-by-hidden",
        N_("each head's dot products divided by sqrt(num_hiddens) instead of sqrt(d) of the head"),
        N_(
            "After transpose_qkv each head's queries have d = num_hiddens / num_heads entries, so each "
            "head's scores are divided by sqrt(d), its own size (the book's DotProductAttention reads d from "
            "queries.shape[-1]); sqrt(num_hiddens) flattens every head's weights."
        ),
        {"scale": "sqrt_hidden"},
    ),
    Mistake(
        "no-tanh",
        N_("additive attention without the tanh"),
        N_(
            "Without tanh, w_v^T (W_q q + W_k k) = w_v^T W_q q + w_v^T W_k k: the query's part is the same "
            "for every key and cancels in the softmax, so the query has no effect (book eq. 11.3.7 has tanh)."
        ),
        {"tanh": False},
    ),
    Mistake(
        "heads-split-wrong",
        N_("heads split from the wrong dimension"),
        N_(
            "Reshape (batch, steps, num_hiddens) to (batch, steps, num_heads, d) and then move the heads "
            "forward (permute(0, 2, 1, 3)); reshaping straight to (batch, num_heads, steps, d) mixes "
            "positions into heads."
        ),
        {"split": "wrong"},
    ),
    Mistake(
        "heads-merged-wrong",
        N_("transpose_output does not undo transpose_qkv"),
        N_(
            "Go back the way transpose_qkv came: (batch * num_heads, steps, d) -> (batch, num_heads, steps, "
            "d) -> permute(0, 2, 1, 3) -> (batch, steps, num_hiddens); a plain reshape mixes heads and "
            "positions."
        ),
        {"merge": "wrong"},
    ),
    Mistake(
        "valid-lens-tiled",
        N_("valid_lens repeated with .repeat instead of repeat_interleave"),
        N_(
            "After transpose_qkv the rows are sentence 0's heads, then sentence 1's heads, ...; each valid "
            "length must be repeated num_heads times in place (torch.repeat_interleave(valid_lens, "
            "num_heads, dim=0)), while .repeat tiles the whole list and gives heads another sentence's "
            "length."
        ),
        {"repeat": "tile"},
    ),
    Mistake(
        "no-output-projection",
        N_("the heads are concatenated but W_o is not applied"),
        N_(
            "Multi-head attention ends with the output projection W_o over the concatenated heads "
            "(book eq. 11.5.2)."
        ),
        {"w_o": False},
    ),
    Mistake(
        "sin-cos-swapped",
        N_("sine and cosine swapped"),
        N_("The book puts sin at the even columns (P[:, 0::2]) and cos at the odd ones (P[:, 1::2])."),
        {"table": "swapped"},
    ),
    Mistake(
        "frequency-exponent",
        N_("the frequencies use 10000^(j/d) instead of 10000^(2j/d)"),
        N_(
            "Columns 2j and 2j+1 share the frequency 1 / 10000^(2j/d): the exponent runs over the even "
            "column indices (torch.arange(0, num_hiddens, 2) / num_hiddens)."
        ),
        {"table": "exponent"},
    ),
    Mistake(
        "pe-sliced-by-batch",
        N_("the positional table is sliced by the batch size, not the number of steps"),
        N_(
            "X is (batch, steps, num_hiddens), so X gets the table's first `steps` rows, "
            "self.P[:, :X.shape[1], :]; X.shape[0] is the batch size, which fails unless it is 1 (every "
            "step then gets row 0) or equal to the steps."
        ),
        {"pe_rows": "batch"},
    ),
    Mistake(
        "no-relu",
        N_("the position-wise FFN has no ReLU"),
        N_(
            "Two dense layers without a nonlinearity between them are one linear map; the FFN is "
            "dense2(relu(dense1(X)))."
        ),
        {"relu": False},
    ),
    Mistake(
        "norm-before-add",
        N_("add & norm normalises Y before the residual sum"),
        N_(
            "The book's (post-norm) AddNorm is LayerNorm(dropout(Y) + X): add the residual first, then "
            "normalise the sum."
        ),
        {"addnorm": "norm_first"},
    ),
    Mistake(
        "no-residual",
        N_("add & norm leaves out the residual X"),
        N_(
            "The residual connection is the 'add' in add & norm: LayerNorm(dropout(Y) + X), not LayerNorm(Y)."
        ),
        {"addnorm": "no_residual"},
    ),
    Mistake(
        "block-residual-from-input",
        N_("the encoder block's second add & norm adds the block's input X"),
        N_(
            "Each add & norm adds the input of the sublayer it wraps: addnorm2(Y, ffn(Y)), with Y the first "
            "add & norm's output."
        ),
        {"block_residual": "X"},
    ),
    Mistake(
        "block-without-mask",
        N_("the encoder block's self-attention gets no valid_lens"),
        N_(
            "Pass valid_lens to self.attention(X, X, X, valid_lens) so that no position attends to padding "
            "(if you do, your masked_softmax ignores it: check masked_softmax)."
        ),
        {"block_mask": False},
    ),
    Mistake(
        "decoder-not-causal",
        N_("the decoder block's self-attention lets a step see the steps after it in training"),
        N_(
            "In training all target steps go in at once, so step t must attend to steps 1..t only: the book "
            "gives self-attention dec_valid_lens = torch.arange(1, num_steps + 1).repeat(batch_size, 1) when "
            "self.training (and None in prediction, where the later steps do not exist yet)."
        ),
        {"causal": False},
    ),
    Mistake(
        "cross-attention-without-mask",
        N_("the decoder block's encoder-decoder attention ignores enc_valid_lens"),
        N_(
            "Pass enc_valid_lens to self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens), so that no "
            "target step attends to the source's padding."
        ),
        {"cross_mask": False},
    ),
    Mistake(
        "query-from-first-layer",
        N_("the decoder's query is the first GRU layer's state"),
        N_(
            "The query is the previous step's state of the top layer, hidden_state[-1]; hidden_state[0] is "
            "the bottom layer (the same only with one layer)."
        ),
        {"query_layer": 0},
    ),
    Mistake(
        "decoder-without-mask",
        N_("the decoder's attention ignores enc_valid_lens"),
        N_(
            "Pass enc_valid_lens to the attention at every step, so that the decoder never attends to the "
            "source's padding (if you do, your masked_softmax ignores it: check masked_softmax)."
        ),
        {"decoder_mask": False},
    ),
    Mistake(
        "concat-order-swapped",
        N_("the decoder's GRU input is cat(x, context) instead of cat(context, x)"),
        N_(
            "The book feeds the GRU torch.cat((context, x), dim=-1), the context first; swapped, the shapes "
            "still agree but each weight of rnn.weight_ih_l0 meets the other input, so it is another model "
            "(and the book's trained weights read the context as the embedding)."
        ),
        {"concat": "embedding_first"},
    ),
    Mistake(
        "init-state-not-transposed",
        N_("init_state keeps the encoder's outputs time-major"),
        N_(
            "The encoder's outputs come as (steps, batch, num_hiddens); init_state turns them into the "
            "attention's keys and values, which are (batch, steps, num_hiddens): outputs.permute(1, 0, 2). "
            "Without it the attention's first matrix product fails, so the error points at the attention, "
            "not at init_state."
        ),
    ),
    Mistake(
        "embedding-not-scaled",
        N_("the embedding is not multiplied by sqrt(num_hiddens) before the positions are added"),
        N_(
            "The positional encoding's entries lie in [-1, 1], and the embedding's are drawn with their own "
            "scale; the book multiplies the embedding by math.sqrt(self.num_hiddens) before adding the "
            "positions, self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens)), so neither "
            "drowns the other (a trained model's numbers change without it)."
        ),
        {"embed_scale": "none"},
    ),
    Mistake(
        "embedding-scaled-after-positions",
        N_("the sum of the embedding and the positions is multiplied by sqrt(num_hiddens)"),
        N_(
            "Only the embedding is scaled: self.pos_encoding(self.embedding(X) * "
            "math.sqrt(self.num_hiddens)); scaling the output of pos_encoding scales the positions (and the "
            "dropout's output) too."
        ),
        {"embed_scale": "after"},
    ),
    Mistake(
        "positions-left-out",
        N_("the embedding goes to the blocks without the positional encoding"),
        N_(
            "Self-attention treats its inputs as a set, so without positions the Transformer cannot tell "
            "word order: pass the scaled embedding through self.pos_encoding before the first block."
        ),
        {"positions": False},
    ),
    Mistake(
        "weights-of-last-block-only",
        N_("the encoder keeps only one block's attention weights"),
        N_(
            "The book keeps one entry per block: self.attention_weights = [None] * len(self.blks) before the "
            "loop, then self.attention_weights[i] = blk.attention.attention.attention_weights in it; a "
            "single attribute set in the loop holds the last block's alone."
        ),
        {"block_weights": "last"},
    ),
    Mistake(
        "cache-not-kept",
        N_("in prediction each decoder block sees only the current token, not the tokens before it"),
        N_(
            "One token at a time, block i's self-attention must see every token decoded so far: its keys and "
            "values are torch.cat((state[2][self.i], X), dim=1), and the block writes them back with "
            "state[2][self.i] = key_values, so that the next step finds them. Without that write (or without "
            "the concatenation) each step attends to itself alone; training, which feeds all steps at once, "
            "does not show it."
        ),
        {"cache": "none"},
    ),
    Mistake(
        "cache-overwritten",
        N_("the decoder block's cache keeps only the latest token"),
        N_(
            "state[2][self.i] must hold every token so far: store the concatenation, state[2][self.i] = "
            "key_values; storing X keeps the newest token alone, so each step sees only itself and the one "
            "before it."
        ),
        {"cache": "last"},
    ),
    Mistake(
        "cache-not-per-block",
        N_("init_state gives fewer cache slots than the decoder has blocks"),
        N_(
            "Each block keeps its own cache at state[2][self.i]: init_state returns [enc_outputs, "
            "enc_valid_lens, [None] * self.num_layers] (num_blks in d2l 1.0), one slot per block, and "
            "each block is built with its index i."
        ),
    ),
    Mistake(
        "nw-exponent-sign",
        N_("the kernel's exponent is +((q - k) w)^2 / 2"),
        N_(
            "The Gaussian kernel is exp(-u^2 / 2): the minus sign gives the nearest keys the largest "
            "weights; without it the softmax favours the keys farthest from the query."
        ),
        {"nw_sign": 1},
    ),
    Mistake(
        "nw-queries-tiled",
        N_("the queries repeated with .repeat instead of repeat_interleave"),
        N_(
            "Row i of the (queries, keys) distances must hold query i against its own keys: "
            "queries.repeat_interleave(keys.shape[1]).reshape(-1, keys.shape[1]) repeats each query in "
            "place, while .repeat tiles the whole list and pairs keys with other queries."
        ),
        {"nw_repeat": "tile"},
    ),
    Mistake(
        "nw-w-on-squared-distance",
        N_("w multiplies the squared distance, not the distance"),
        N_(
            "The book's parametric kernel is -((queries - keys) * self.w)**2 / 2: w scales the distance, so "
            "the exponent grows with w^2 (the bandwidth is 1/w); -(queries - keys)**2 * self.w / 2 is "
            "another kernel, which w < 0 turns upside down."
        ),
        {"nw_w": "squared"},
    ),
    Mistake(
        "changes-its-input",
        N_("the block changes its caller's input in place"),
        N_(
            "X += ... (or X[...] = ..., X.add_(...)) writes into the very tensor the caller passed: the "
            "caller's X changes under it, and in a network autograd fails (a leaf or a saved tensor modified "
            "in place); write X = X + ..., which makes a new tensor."
        ),
    ),
    Mistake(
        "gradient-cut",
        N_("no gradient reaches the block's input"),
        N_(
            "The output must stay connected to the inputs for training: .detach(), .data, .numpy() or a "
            "torch.no_grad() block in forward cut the graph, so nothing before the block learns."
        ),
    ),
    Mistake(
        "bias-hard-coded",
        N_("the layers' bias is fixed instead of following the constructor's bias argument"),
        N_(
            "The book writes nn.Linear(..., bias=bias) (use_bias for the Transformer's blocks), and the "
            "check passes bias=False; a hard-coded bias=True adds parameters the book's block does not have, "
            "and a hard-coded bias=False where the book keeps one leaves some out."
        ),
    ),
    Mistake(
        "parameters-not-registered",
        N_("a layer or a weight the module does not register"),
        N_(
            "nn.Module finds only the layers set as its attributes (or held in nn.Sequential, nn.ModuleList) "
            "and the tensors wrapped in nn.Parameter: blocks kept in a plain Python list, or self.w = "
            "torch.rand(1, requires_grad=True), are left out of parameters(), so the optimizer never trains "
            "them and .to(device) never moves them. The book uses nn.Sequential with add_module and "
            "nn.Parameter."
        ),
    ),
    Mistake(
        "dropout-in-eval",
        N_("dropout applied in eval mode"),
        N_(
            "Use an nn.Dropout module (self.dropout), which model.eval() turns off; F.dropout(x, p) without "
            "training=self.training drops values at test time too."
        ),
    ),
    Mistake(
        "dropout-not-in-training",
        N_("dropout never applied in training"),
        N_(
            "In train mode the block should drop values with probability p (the book's self.dropout); yours "
            "gives the same output in train and eval mode."
        ),
    ),
)

BY_ID = {mistake.id: mistake for mistake in MISTAKES}
