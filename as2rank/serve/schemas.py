"""The request and response shapes of the server's routes (pydantic models: FastAPI validates the requests with them
and writes the OpenAPI schema from them).

Requests are strict: a field of the wrong type (a number for a text, ``"true"`` for a boolean) and a field that the
route does not know are refused (HTTP 422 naming the field), so that a misspelt option (``top_k`` for ``top_n``)
is not silently ignored. Every field that a text-embeddings-inference or Cohere client sends is known; those that
as2rank cannot honour otherwise are accepted and ignored where ignoring them changes nothing that the client asked
for (Cohere's ``model``: a server serves its one model), and refused where it would. No field names a file, a model
or a module.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AnswerRequest", "AnswerResponse", "CohereDocument", "CohereRerankRequest", "CohereRerankResponse",
           "CohereResult", "ErrorResponse", "Rank", "RerankRequest"]

_QUERY = "The question (query) the texts are ranked for."
_ORDER = ("In their retrieval order: the model reads a text's index as its position, as rank-reading models such "
          "as RR and WO+RR use it.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ----------------------------------------------------------------------------------------------- TEI: /rerank
class RerankRequest(_Strict):
    """text-embeddings-inference's ``POST /rerank`` request."""

    query: str = Field(min_length=1, description=_QUERY)
    texts: List[str] = Field(min_length=1, description="The candidate texts. " + _ORDER)
    raw_scores: bool = Field(False, description="Return the model's own ranking score instead of the probability "
                             "that the text answers the query (a calibrated model); an uncalibrated model always "
                             "returns its own score.")
    return_text: bool = Field(False, description="Return each text with its result.")
    truncate: Optional[bool] = Field(False, description="Accepted for compatibility: the model always truncates each "
                                     "question/text pair to its maximum length, as in training (the server's limit "
                                     "on characters applies before).")
    truncation_direction: Literal["Right", "right", "Left", "left"] = Field(
        "Right", description="Only Right: the model truncates the end of each pair, as in training.")


class Rank(BaseModel):
    """One text of a ``/rerank`` response."""

    index: int = Field(description="The text's index in the request.")
    score: float = Field(description="The probability that the text answers the query (a calibrated model, "
                         "unless raw_scores), else the model's ranking score; higher is better.")
    text: Optional[str] = Field(None, description="The text, with return_text.")


# ----------------------------------------------------------------------------------------------- Cohere: /v1/rerank
class CohereDocument(BaseModel):
    """A document given as an object: its ``text`` is ranked; other fields are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    text: str = Field(description="The text ranked.")


class CohereRerankRequest(_Strict):
    """Cohere's ``POST /v1/rerank`` (and ``/v2/rerank``) request."""

    query: str = Field(min_length=1, description=_QUERY)
    documents: List[Union[str, CohereDocument]] = Field(
        min_length=1, description="The candidate texts, as strings or objects with a text field. " + _ORDER)
    top_n: Optional[int] = Field(None, ge=1, description="Return the best top_n documents (default: all).")
    return_documents: Optional[bool] = Field(None, description="Return each document's text with its result.")
    model: Optional[str] = Field(None, description="Accepted and ignored: the server serves one model, whatever "
                                 "the name (GET /info says which).")
    rank_fields: Optional[List[str]] = Field(None, description="Only [\"text\"]: the text field is ranked.")
    max_chunks_per_doc: Optional[int] = Field(None, ge=1, description="Accepted and ignored: the model truncates "
                                              "each question/document pair to its maximum length.")
    max_tokens_per_doc: Optional[int] = Field(None, ge=1, description="Accepted and ignored, as max_chunks_per_doc.")
    priority: Optional[int] = Field(None, description="Accepted and ignored: requests are served in arrival order.")


class CohereResultDocument(BaseModel):
    text: str


class CohereResult(BaseModel):
    """One document of a Cohere rerank response."""

    index: int = Field(description="The document's index in the request.")
    relevance_score: float = Field(description="The probability that the document answers the query (a calibrated "
                                   "model), else the model's ranking score; higher is better.")
    document: Optional[CohereResultDocument] = Field(None, description="With return_documents.")


class CohereRerankResponse(BaseModel):
    """Cohere's rerank response: the results best first."""

    id: str
    results: List[CohereResult]
    meta: dict


# ----------------------------------------------------------------------------------------------- /answer
class AnswerRequest(_Strict):
    """A question and its candidates, for the answer-or-abstain decision of a calibrated model."""

    question: str = Field(min_length=1, description="The question.")
    candidates: List[str] = Field(min_length=1, description="The candidate sentences. " + _ORDER)
    target_precision: Optional[float] = Field(
        None, gt=0, le=1, strict=False, description="Answer only when the model's held-out answers at that threshold "
        "were right at least this often (default: the model's own threshold).")
    target_coverage: Optional[float] = Field(
        None, gt=0, le=1, strict=False, description="Answer this fraction of questions, the most confident (at most "
        "one of the two targets).")


class AnswerResponse(BaseModel):
    """The model's answer, or its abstention."""

    answer: Optional[str] = Field(description="The top candidate when the model answers, else null.")
    index: int = Field(description="The index of the top candidate in the request (also when the model abstains).")
    probability: float = Field(description="The probability that the top candidate answers the question.")
    answered: bool = Field(description="Whether the probability exceeds the threshold.")
    threshold: float = Field(description="The threshold applied.")


# ----------------------------------------------------------------------------------------------- errors
class ErrorResponse(BaseModel):
    """Every error: one line, its kind and, for a limit, the limit's name and value."""

    error: str
    error_type: str = Field(description="validation, limit, auth, overloaded, timeout, model or not_found.")
    limit: Optional[str] = Field(None, description="The server option that refused the request.")
    value: Optional[float] = Field(None, description="That option's value.")
