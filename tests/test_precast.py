"""The precast copy of a module (linear weights cast to the autocast dtype once) predicts the same bits."""

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from as2rank.neural.precast import PRECAST_COPIES, PrecastCopies, PrecastLinear, precast_copy  # noqa: E402


class Net(nn.Module):
    """An encoder run under autocast and a head run in float32 outside it, as the cross-encoders do."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        hidden = self.encoder(x)
        with torch.autocast("cpu", enabled=False):
            return self.head(hidden.float())


def scores(module, x, dtype=torch.bfloat16):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        return module(x)


def test_the_copy_gives_the_same_bits_and_shares_the_float32_tensors():
    net, x = Net().eval(), torch.randn(5, 16)
    copy = precast_copy(net, torch.bfloat16)
    assert torch.equal(scores(copy, x), scores(net, x))
    assert torch.equal(copy(x), net(x))  # without autocast: the float32 weights
    layers = [m for m in copy.modules() if isinstance(m, PrecastLinear)]
    assert len(layers) == 3 and all(m.cast[1].dtype == torch.bfloat16 for m in layers)
    assert all(a is b for a, b in zip(copy.parameters(), net.parameters()))
    assert not any(isinstance(m, PrecastLinear) for m in net.modules())  # the fitted module is untouched


def test_a_copy_is_kept_until_a_parameter_changes():
    copies, net, x = PrecastCopies(), Net().eval(), torch.randn(5, 16)
    first = copies.get(net, torch.bfloat16)
    assert copies.get(net, torch.bfloat16) is first
    with torch.no_grad():
        net.encoder[0].weight.add_(0.5)  # in place: the version counter moves
    second = copies.get(net, torch.bfloat16)
    assert second is not first and torch.equal(scores(second, x), scores(net, x))
    net.encoder[3].weight = nn.Parameter(torch.zeros(8, 32))  # replaced
    third = copies.get(net, torch.bfloat16)
    assert third is not second and torch.equal(scores(third, x), scores(net, x))
    assert copies.get(net, torch.float16) is not third  # another dtype, another copy


def test_autocast_to_another_dtype_reads_the_float32_weights():
    net, x = Net().eval(), torch.randn(5, 16)
    copy = PRECAST_COPIES.get(net, torch.bfloat16)
    assert torch.equal(scores(copy, x, torch.float16), scores(net, x, torch.float16))


@pytest.mark.parametrize("pooling", ["cls", "classifier"])
def test_a_cross_encoder_scores_the_same_bits_through_its_precast_copy(pooling):
    """The real network: its encoder under bfloat16 autocast, its head in float32 outside it, or (a sequence
    classifier's checkpoint) the head inside the encoder, called with autocast off."""
    transformers = pytest.importorskip("transformers")
    from tests.test_transformer import SPECIAL, WORDS, synthetic, tiny_config

    from as2rank.neural.predict import predict_logits
    from as2rank.neural.tokens import encode_pairs
    from as2rank.transformer.network import CrossEncoder

    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    torch.manual_seed(0)
    if pooling == "classifier":
        config = tiny_config("bert", 2)
        config.num_labels = 1
        encoder = transformers.AutoModelForSequenceClassification.from_config(config)
    else:
        encoder = transformers.AutoModel.from_config(tiny_config("bert", 2))
    net = CrossEncoder(encoder, pooling).eval()
    X, _ = synthetic()
    encoded = encode_pairs(tokenizer, X["question"], X["candidate"], max_length=32)
    cpu = torch.device("cpu")

    def logits(module):
        return predict_logits(module, encoded, cpu, batch_tokens=64, dtype=torch.bfloat16,
                              progress=lambda batches, n, desc: batches)

    expected = logits(net)
    assert (logits(precast_copy(net, torch.bfloat16)) == expected).all()
    assert any(isinstance(m, PrecastLinear) for m in PRECAST_COPIES.get(net, torch.bfloat16).modules())
