"""kvpress's pipeline on kvfold: a context compressed once, then each
question answered from the compressed cache.

    pipe = kvfold.pipeline(model)
    pipe(context, question="Who wrote it?", press=SnapKVPress(0.8))["answer"]
    pipe(context, questions=["Who?", "When?"], press="kvzip:budget=0.1")["answers"]

As kvpress does it: the context and the question go into one user turn of
the model's chat template (raw text when the model has none); the text
before the question is prefilled and compressed, without the question, so
the policy cannot see what will be asked; each question (with the rest of
the template and answer_prefix) then runs on a copy of the compressed
session, greedy, for at most max_new_tokens.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from ._core import ImageLike, KVFoldError, Model


class KVPressPipeline:
    def __init__(self, model: Model, n_ctx: int = 0, template: Optional[str] = None):
        self.model, self.n_ctx, self.template = model, n_ctx, template

    def _split(self, context: str, question: str, answer_prefix: str) -> tuple[str, str, bool]:
        """(the templated text before the question, the question and what
        follows it, whether a chat template was applied)."""
        try:
            text = self.model.apply_chat_template([{"role": "user", "content": context + question}], self.template)
        except KVFoldError as e:
            if e.status_name != "unsupported":  # no template recognised: the raw text
                raise
            return context, question + answer_prefix, False
        at = text.rfind(question) if question else text.rfind(context) + len(context)
        return text[:at], text[at:] + answer_prefix, True

    def __call__(self, context: str, question: Optional[str] = None, questions: Optional[Sequence[str]] = None,
                 press=None, answer_prefix: str = "", max_new_tokens: int = 50, images: Sequence[ImageLike] = (),
                 stop: Union[str, Sequence[str], None] = None) -> dict:
        """{"answer": ...} for question, {"answers": [...]} for questions
        (one of them, or neither: the context's own continuation). press: a
        kvfold.presses press or a spec string (None: the full cache)."""
        if question is not None and questions is not None:
            raise ValueError("give question or questions, not both")
        qs = [question or ""] if questions is None else list(questions)
        head, _, chat = self._split(context, qs[0], answer_prefix)
        answers = []
        media = [self.model.encode_image(i) for i in images]
        with self.model.session(kv=press, n_ctx=self.n_ctx) as base:
            try:
                base.prefill_text(head, media=media, add_bos=True, special=chat)
                base.compress()
                for q in qs:
                    _, tail, _ = self._split(context, q, answer_prefix)
                    with base.copy() as s:
                        s.prefill(self.model.tokenize(tail, add_bos=False, special=chat))
                        answers.append("".join(s.generate(max_new_tokens, stop=stop)))
            finally:
                for m in media:
                    m.close()
        return {"answer": answers[0]} if questions is None else {"answers": answers}


def pipeline(model: Model, n_ctx: int = 0, template: Optional[str] = None) -> KVPressPipeline:
    """kvpress's `pipeline("kv-press-text-generation", model=...)` on a kvfold model."""
    return KVPressPipeline(model, n_ctx, template)
