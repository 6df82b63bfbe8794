"""Run by ``torchrun`` from ``tests/test_scale.py``: fit a tiny random TransformerRanker in every process and
save what each process ends with (``rank<r>.pt`` in the folder given as the first argument)."""

import sys
from pathlib import Path

import torch

from as2rank.transformer.ranker import TransformerRanker
from tests.test_transformer import MAX_LENGTH, SPECIAL, WORDS, synthetic, tiny_config


def tokenizer(folder: Path):
    import transformers

    path = folder / "vocab.txt"
    path.write_text("\n".join(SPECIAL + WORDS) + "\n")
    return transformers.BertTokenizerFast(vocab_file=str(path))


def ranker(tok, **params):
    """The model both the test and the launched processes fit: dropout off, so that steps are deterministic."""
    config = tiny_config("bert", layers=2)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    defaults = dict(
        model=config, tokenizer=tok, max_length=MAX_LENGTH, epochs=2, batch_size=8, learning_rate=1e-3,
        random_state=0, device="cpu", precision="fp32", reuse_fit=False, n_threads=1,
    )
    return TransformerRanker(**{**defaults, **params})


def main(out: Path):
    rank = int(__import__("os").environ["RANK"])
    folder = out / f"vocab{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    X, y = synthetic(n_questions=12)
    model = ranker(tokenizer(folder), verbose=True).fit(X, y)
    torch.save(
        {
            "world_size": torch.distributed.get_world_size(),
            "step_loss": model.history_.step_loss,
            "learning_rate": model.history_.learning_rate,
            "state_dict": model.model_.state_dict(),
            "scores": model.predict(X),
        },
        out / f"rank{rank}.pt",
    )
    model.save_pretrained(out / "saved")  # written by the main process only


if __name__ == "__main__":
    main(Path(sys.argv[1]))
