"""kvpress's pipeline on kvfold: a context compressed once, then each
question answered from the compressed cache.

    pipe = kvfold.pipeline(model)
    pipe(context, question="Who wrote it?", press=SnapKVPress(0.8))["answer"]
    pipe(context, questions=["Who?", "When?"], press="kvzip:budget=0.1")["answers"]

As kvpress does it: the context goes into a user turn of the model's chat
template (raw text when the model has none) and is prefilled and
compressed alone, so the policy cannot see what will be asked; each
question, followed by the rest of the template's turn and answer_prefix,
then runs on a copy of the compressed session, greedy, for at most
max_new_tokens.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from ._core import ImageLike, KVFoldError, Model


class KVPressPipeline:
    def __init__(self, model: Model, n_ctx: int = 0, template: Optional[str] = None):
        self.model, self.n_ctx, self.template = model, n_ctx, template

    def _split(self, context: str) -> tuple[str, str, bool]:
        """(the context as the chat template starts it, what the template puts
        after the user's text, whether a template was applied), split at a
        separator no text contains, as kvpress does; without a template the
        raw context and a newline after the question."""
        separator = "#" * (len(context) + 10)
        try:
            text = self.model.apply_chat_template([{"role": "user", "content": context + separator}], self.template)
        except KVFoldError as e:
            if e.status_name != "unsupported":  # no template recognised: the raw text
                raise
            return context, "\n", False
        head, suffix = text.split(separator)
        return head, suffix, True

    def __call__(self, context: str, question: Optional[str] = None, questions: Optional[Sequence[str]] = None,
                 press=None, answer_prefix: str = "", max_new_tokens: int = 50, images: Sequence[ImageLike] = (),
                 stop: Union[str, Sequence[str], None] = None) -> dict:
        """{"answer": ...} for question, {"answers": [...]} for questions
        (one of them, or neither: the context's own continuation). press: a
        kvfold.presses press or a spec string (None: the full cache)."""
        if question is not None and questions is not None:
            raise ValueError("give question or questions, not both")
        qs = [question or ""] if questions is None else list(questions)
        head, suffix, chat = self._split(context)
        answers = []
        media = [self.model.encode_image(i) for i in images]
        with self.model.session(kv=press, n_ctx=self.n_ctx) as base:
            try:
                base.prefill_text(head, media=media, add_bos=True, special=chat)
                base.compress()
                for q in qs:
                    with base.copy() as s:
                        s.prefill(self.model.tokenize(q + suffix + answer_prefix, add_bos=False, special=chat))
                        answers.append("".join(s.generate(max_new_tokens, stop=stop)))
            finally:
                for m in media:
                    m.close()
        return {"answer": answers[0]} if questions is None else {"answers": answers}


def pipeline(model: Model, n_ctx: int = 0, template: Optional[str] = None) -> KVPressPipeline:
    """kvpress's `pipeline("kv-press-text-generation", model=...)` on a kvfold model."""
    return KVPressPipeline(model, n_ctx, template)
