import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine extra threads wait on each other."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def toy():
    """Three questions, rows of question 'q2' interleaved and out of position order."""
    X = pd.DataFrame(
        {
            "qid": ["q1", "q1", "q1", "q2", "q3", "q2", "q3", "q2"],
            "question": [
                "who wrote hamlet",
                "who wrote hamlet",
                "who wrote hamlet",
                "what is the capital of france",
                "when was the eiffel tower built",
                "what is the capital of france",
                "when was the eiffel tower built",
                "what is the capital of france",
            ],
            "candidate": [
                "Hamlet is a tragedy .",
                "Shakespeare wrote Hamlet around 1600 .",
                "It is set in Denmark .",
                "France is in Europe .",
                "The Eiffel Tower was built in 1889 .",
                "Paris is the capital of France .",
                "It is in Paris .",
                "The capital has many museums .",
            ],
            "position": [0, 1, 2, 2, 0, 0, 1, 1],
        }
    )
    y = np.array([0, 1, 0, 0, 1, 1, 0, 0])
    return X, y

