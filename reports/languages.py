"""English names of the languages the benchmarks name by ISO 639-1 code (MIRACL's 18, MKQA's 26, C-MTEB,
BEIR), for reports: ``language_label("sw")`` is ``"Swahili (sw)"``; an unknown code is shown as it is."""
from __future__ import annotations

LANGUAGE_NAMES = {
    "ar": "Arabic", "bn": "Bengali", "da": "Danish", "de": "German", "en": "English", "es": "Spanish",
    "fa": "Persian", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "km": "Khmer", "ko": "Korean", "ms": "Malay",
    "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ru": "Russian", "sv": "Swedish",
    "sw": "Swahili", "te": "Telugu", "th": "Thai", "tr": "Turkish", "vi": "Vietnamese", "yo": "Yoruba",
    "zh": "Chinese", "zh_cn": "Chinese (simplified)", "zh_hk": "Chinese (Hong Kong)", "zh_tw": "Chinese (traditional)",
}


def language_label(code: str) -> str:
    """``"Swahili (sw)"`` for a known code (any case, ``-`` or ``_``), else the code itself."""
    name = LANGUAGE_NAMES.get(code.strip().lower().replace("-", "_"))
    return f"{name} ({code})" if name else code
