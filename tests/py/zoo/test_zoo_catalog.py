"""xsp.zoo.catalog (issue 26): the built-in zoo, manifests, --models strings, sources, keys.

Every built-in entry is built small (Entry.build(small=True)) and run once at batch 2, its
output's type and shape checked; every full size is built on the meta device, its model class
and parameter count checked (the published sizes: resnet-50 25,557,032, vit-base 86,567,656,
bert-base 109,482,240, gpt2 124,439,808, Llama-3.2-1B 1,235,814,400, Mistral-7B 7,241,732,096,
...), and a few cheap ones run at full size.  The parsers are checked on good manifests and on
every kind of bad one, with their exact messages.  Nothing here depends on the machine's speed.
"""
import dataclasses
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers

from xsp.zoo import catalog
from xsp.zoo.catalog import Zoo, ZooError, load

# the `slow` tier (pytest -m "not slow" leaves it out): every built-in architecture built and run once
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

TRANSFORMERS = transformers.__version__
# the keys of two built-in entries: a change of these is a change of every stored result's key
RESNET50_KEY = "resnet-50#acd48aadd934fc5f"
LSTM_KEY = "lstm-lm-medium#5d7bd0c5dc080d50"

# what each built-in entry gives when built small and run at batch 2: the output's type and
# its main tensor's shape
SMALL_OUTPUTS = {
    "resnet-18": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "resnet-50": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "resnet-101": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "resnet-152": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "convnext-tiny": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "convnext-base": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "convnextv2-tiny": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "regnet-y-040": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "bit-50": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "efficientnet-b0": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "efficientnet-b7": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "poolformer-s12": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "mobilenet-v1": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "mobilenet-v2": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "mobilenet-v2-1.4": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "mobilevit-small": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "mobilevitv2-1.0": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "levit-128s": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "swiftformer-xs": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "vit-base": ("ImageClassifierOutput", (2, 1000)),
    "vit-large": ("ImageClassifierOutput", (2, 1000)),
    "deit-tiny": ("ImageClassifierOutput", (2, 1000)),
    "deit-small": ("ImageClassifierOutput", (2, 1000)),
    "deit-base": ("ImageClassifierOutput", (2, 1000)),
    "beit-base": ("ImageClassifierOutput", (2, 1000)),
    "data2vec-vision-base": ("ImageClassifierOutput", (2, 1000)),
    "dinov2-small": ("ImageClassifierOutput", (2, 1000)),
    "dinov2-base": ("ImageClassifierOutput", (2, 1000)),
    "swin-tiny": ("SwinImageClassifierOutput", (2, 1000)),
    "swin-base": ("SwinImageClassifierOutput", (2, 1000)),
    "swinv2-tiny": ("Swinv2ImageClassifierOutput", (2, 1000)),
    "focalnet-tiny": ("FocalNetImageClassifierOutput", (2, 1000)),
    "segformer-b0": ("SegFormerImageClassifierOutput", (2, 1000)),
    "cvt-13": ("ImageClassifierOutputWithNoAttention", (2, 1000)),
    "pvt-tiny": ("ImageClassifierOutput", (2, 1000)),
    "pvt-v2-b0": ("ImageClassifierOutput", (2, 1000)),
    "hiera-base": ("HieraForImageClassificationOutput", (2, 1000)),
    "bert-base": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 32, 64)),
    "bert-large": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 32, 64)),
    "roberta-base": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 32, 64)),
    "xlm-roberta-base": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 32, 64)),
    "distilbert-base": ("BaseModelOutput", (2, 32, 64)),
    "albert-base-v2": ("BaseModelOutputWithPooling", (2, 32, 64)),
    "electra-small": ("BaseModelOutputWithPastAndCrossAttentions", (2, 32, 64)),
    "electra-base": ("BaseModelOutputWithPastAndCrossAttentions", (2, 32, 64)),
    "deberta-base": ("BaseModelOutput", (2, 32, 64)),
    "deberta-v3-base": ("BaseModelOutput", (2, 32, 64)),
    "mpnet-base": ("BaseModelOutputWithPooling", (2, 32, 64)),
    "convbert-base": ("BaseModelOutputWithCrossAttentions", (2, 32, 64)),
    "megatron-bert-345m": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 32, 64)),
    "modernbert-base": ("BaseModelOutput", (2, 32, 64)),
    "squeezebert": ("BaseModelOutputWithPooling", (2, 32, 64)),
    "mobilebert": ("BaseModelOutputWithPooling", (2, 32, 64)),
    "longformer-base": ("LongformerBaseModelOutputWithPooling", (2, 64, 64)),
    "bigbird-roberta-base": ("BaseModelOutputWithPoolingAndCrossAttentions", (2, 128, 64)),
    "fnet-base": ("BaseModelOutputWithPooling", (2, 32, 64)),
    "t5-small-encoder": ("BaseModelOutputWithPastAndCrossAttentions", (2, 32, 64)),
    "t5-base-encoder": ("BaseModelOutputWithPastAndCrossAttentions", (2, 32, 64)),
    "gpt2": ("CausalLMOutputWithCrossAttentions", (2, 32, 1000)),
    "gpt2-medium": ("CausalLMOutputWithCrossAttentions", (2, 32, 1000)),
    "gpt-neo-125m": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "opt-125m": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "pythia-160m": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "smollm-135m": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "llama-3.2-1b": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "qwen2-0.5b": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "qwen3-0.6b": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "mistral-7b": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "gemma-2b": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "phi-1": ("CausalLMOutputWithPast", (2, 32, 1000)),
    "bloom-560m": ("CausalLMOutputWithCrossAttentions", (2, 32, 1000)),
    "biogpt": ("CausalLMOutputWithCrossAttentions", (2, 32, 1000)),
    "xglm-564m": ("CausalLMOutputWithCrossAttentions", (2, 32, 1000)),
    "bart-base": ("Seq2SeqModelOutput", (2, 32, 64)),
    "bart-large": ("Seq2SeqModelOutput", (2, 32, 64)),
    "mamba-130m": ("MambaCausalLMOutput", (2, 32, 1000)),
    "rwkv-4-169m": ("RwkvCausalLMOutput", (2, 32, 1000)),
    "lstm-lm-small": ("Tensor", (2, 16, 1000)),
    "lstm-lm-medium": ("Tensor", (2, 16, 1000)),
    "lstm-lm-large": ("Tensor", (2, 16, 1000)),
    "gru-lm-medium": ("Tensor", (2, 16, 1000)),
    "rnn-tanh-lm-medium": ("Tensor", (2, 16, 1000)),
    "bilstm-classifier": ("Tensor", (2, 5)),
    "deepspeech2": ("Tensor", (2, 20, 29)),
    "wav2vec2-base": ("Wav2Vec2BaseModelOutput", (2, 12, 64)),
    "hubert-base": ("BaseModelOutput", (2, 12, 64)),
    "wavlm-base": ("Wav2Vec2BaseModelOutput", (2, 12, 64)),
    "unispeech-sat-base": ("Wav2Vec2BaseModelOutput", (2, 12, 64)),
    "data2vec-audio-base": ("Wav2Vec2BaseModelOutput", (2, 12, 64)),
    "whisper-tiny-encoder": ("SequenceClassifierOutput", (2, 2)),
    "whisper-base-encoder": ("SequenceClassifierOutput", (2, 2)),
    "ast-audioset": ("SequenceClassifierOutput", (2, 527)),
    "gcn-cora": ("Tensor", (200, 7)),
    "dlrm-kaggle": ("Tensor", (2, 1)),
}
# each full-size model: its class and parameter count (built on the meta device)
FULL = {
    "resnet-18": ("ResNetForImageClassification", 11_689_512),
    "resnet-50": ("ResNetForImageClassification", 25_557_032),
    "resnet-101": ("ResNetForImageClassification", 44_549_160),
    "resnet-152": ("ResNetForImageClassification", 60_192_808),
    "convnext-tiny": ("ConvNextForImageClassification", 28_589_128),
    "convnext-base": ("ConvNextForImageClassification", 88_591_464),
    "convnextv2-tiny": ("ConvNextV2ForImageClassification", 28_635_496),
    "regnet-y-040": ("RegNetForImageClassification", 20_646_656),
    "bit-50": ("BitForImageClassification", 25_549_352),
    "efficientnet-b0": ("EfficientNetForImageClassification", 5_288_548),
    "efficientnet-b7": ("EfficientNetForImageClassification", 66_347_960),
    "poolformer-s12": ("PoolFormerForImageClassification", 11_915_176),
    "mobilenet-v1": ("MobileNetV1ForImageClassification", 4_231_976),
    "mobilenet-v2": ("MobileNetV2ForImageClassification", 3_504_872),
    "mobilenet-v2-1.4": ("MobileNetV2ForImageClassification", 6_108_776),
    "mobilevit-small": ("MobileViTForImageClassification", 5_578_632),
    "mobilevitv2-1.0": ("MobileViTV2ForImageClassification", 4_901_841),
    "levit-128s": ("LevitForImageClassification", 8_828_168),
    "swiftformer-xs": ("SwiftFormerForImageClassification", 3_475_360),
    "vit-base": ("ViTForImageClassification", 86_567_656),
    "vit-large": ("ViTForImageClassification", 304_326_632),
    "deit-tiny": ("DeiTForImageClassification", 5_717_800),
    "deit-small": ("DeiTForImageClassification", 22_051_432),
    "deit-base": ("DeiTForImageClassification", 86_569_192),
    "beit-base": ("BeitForImageClassification", 86_425_576),
    "data2vec-vision-base": ("Data2VecVisionForImageClassification", 86_425_576),
    "dinov2-small": ("Dinov2ForImageClassification", 22_398_184),
    "dinov2-base": ("Dinov2ForImageClassification", 87_262_696),
    "swin-tiny": ("SwinForImageClassification", 28_288_354),
    "swin-base": ("SwinForImageClassification", 87_768_224),
    "swinv2-tiny": ("Swinv2ForImageClassification", 28_347_154),
    "focalnet-tiny": ("FocalNetForImageClassification", 28_427_116),
    "segformer-b0": ("SegformerForImageClassification", 3_576_392),
    "cvt-13": ("CvtForImageClassification", 19_997_480),
    "pvt-tiny": ("PvtForImageClassification", 13_229_288),
    "pvt-v2-b0": ("PvtV2ForImageClassification", 3_666_760),
    "hiera-base": ("HieraForImageClassification", 51_524_968),
    "bert-base": ("BertModel", 109_482_240),
    "bert-large": ("BertModel", 335_141_888),
    "roberta-base": ("RobertaModel", 124_645_632),
    "xlm-roberta-base": ("XLMRobertaModel", 278_043_648),
    "distilbert-base": ("DistilBertModel", 66_362_880),
    "albert-base-v2": ("AlbertModel", 11_683_584),
    "electra-small": ("ElectraModel", 13_483_008),
    "electra-base": ("ElectraModel", 108_891_648),
    "deberta-base": ("DebertaModel", 124_043_520),
    "deberta-v3-base": ("DebertaV2Model", 183_831_552),
    "mpnet-base": ("MPNetModel", 109_484_928),
    "convbert-base": ("ConvBertModel", 105_680_520),
    "megatron-bert-345m": ("MegatronBertModel", 333_640_704),
    "modernbert-base": ("ModernBertModel", 149_014_272),
    "squeezebert": ("SqueezeBertModel", 51_089_664),
    "mobilebert": ("MobileBertModel", 24_844_544),
    "longformer-base": ("LongformerModel", 148_659_456),
    "bigbird-roberta-base": ("BigBirdModel", 127_468_800),
    "fnet-base": ("FNetModel", 82_861_056),
    "t5-small-encoder": ("T5EncoderModel", 35_330_816),
    "t5-base-encoder": ("T5EncoderModel", 109_628_544),
    "gpt2": ("GPT2LMHeadModel", 124_439_808),
    "gpt2-medium": ("GPT2LMHeadModel", 354_823_168),
    "gpt-neo-125m": ("GPTNeoForCausalLM", 125_198_592),
    "opt-125m": ("OPTForCausalLM", 125_239_296),
    "pythia-160m": ("GPTNeoXForCausalLM", 162_322_944),
    "smollm-135m": ("LlamaForCausalLM", 134_515_008),
    "llama-3.2-1b": ("LlamaForCausalLM", 1_235_814_400),
    "qwen2-0.5b": ("Qwen2ForCausalLM", 494_032_768),
    "qwen3-0.6b": ("Qwen3ForCausalLM", 596_049_920),
    "mistral-7b": ("MistralForCausalLM", 7_241_732_096),
    "gemma-2b": ("GemmaForCausalLM", 2_506_172_416),
    "phi-1": ("PhiForCausalLM", 1_418_270_720),
    "bloom-560m": ("BloomForCausalLM", 559_214_592),
    "biogpt": ("BioGptForCausalLM", 346_763_264),
    "xglm-564m": ("XGLMForCausalLM", 564_463_616),
    "bart-base": ("BartModel", 139_420_416),
    "bart-large": ("BartModel", 406_291_456),
    "mamba-130m": ("MambaForCausalLM", 129_135_360),
    "rwkv-4-169m": ("RwkvForCausalLM", 169_342_464),
    "lstm-lm-small": ("RNNLanguageModel", 2_653_200),
    "lstm-lm-medium": ("RNNLanguageModel", 13_280_400),
    "lstm-lm-large": ("RNNLanguageModel", 51_034_000),
    "gru-lm-medium": ("RNNLanguageModel", 11_587_800),
    "rnn-tanh-lm-medium": ("RNNLanguageModel", 8_202_600),
    "bilstm-classifier": ("BiLSTMClassifier", 18_638_917),
    "deepspeech2": ("DeepSpeech2", 41_187_968),
    "wav2vec2-base": ("Wav2Vec2Model", 94_371_712),
    "hubert-base": ("HubertModel", 94_371_712),
    "wavlm-base": ("WavLMModel", 94_381_936),
    "unispeech-sat-base": ("UniSpeechSatModel", 94_371_712),
    "data2vec-audio-base": ("Data2VecAudioModel", 93_164_288),
    "whisper-tiny-encoder": ("WhisperForAudioClassification", 8_307_458),
    "whisper-base-encoder": ("WhisperForAudioClassification", 20_722_434),
    "ast-audioset": ("ASTForAudioClassification", 86_594_063),
    "gcn-cora": ("GCN", 23_063),
    "dlrm-kaggle": ("DLRM", 42_075_985),
}
# the built-in zoo, family by family, in its order
FAMILIES = {
    "cnn": ["resnet-18", "resnet-50", "resnet-101", "resnet-152", "convnext-tiny",
        "convnext-base", "convnextv2-tiny", "regnet-y-040", "bit-50", "efficientnet-b0",
        "efficientnet-b7", "poolformer-s12"],
    "mobile": ["mobilenet-v1", "mobilenet-v2", "mobilenet-v2-1.4", "mobilevit-small",
        "mobilevitv2-1.0", "levit-128s", "swiftformer-xs"],
    "vit": ["vit-base", "vit-large", "deit-tiny", "deit-small", "deit-base", "beit-base",
        "data2vec-vision-base", "dinov2-small", "dinov2-base", "swin-tiny", "swin-base",
        "swinv2-tiny", "focalnet-tiny", "segformer-b0", "cvt-13", "pvt-tiny", "pvt-v2-b0",
        "hiera-base"],
    "encoder": ["bert-base", "bert-large", "roberta-base", "xlm-roberta-base", "distilbert-base",
        "albert-base-v2", "electra-small", "electra-base", "deberta-base", "deberta-v3-base",
        "mpnet-base", "convbert-base", "megatron-bert-345m", "modernbert-base", "squeezebert",
        "mobilebert", "longformer-base", "bigbird-roberta-base", "fnet-base", "t5-small-encoder",
        "t5-base-encoder"],
    "decoder": ["gpt2", "gpt2-medium", "gpt-neo-125m", "opt-125m", "pythia-160m", "smollm-135m",
        "llama-3.2-1b", "qwen2-0.5b", "qwen3-0.6b", "mistral-7b", "gemma-2b", "phi-1",
        "bloom-560m", "biogpt", "xglm-564m"],
    "seq2seq": ["bart-base", "bart-large"],
    "ssm": ["mamba-130m"],
    "rnn": ["rwkv-4-169m", "lstm-lm-small", "lstm-lm-medium", "lstm-lm-large", "gru-lm-medium",
        "rnn-tanh-lm-medium", "bilstm-classifier", "deepspeech2"],
    "speech": ["wav2vec2-base", "hubert-base", "wavlm-base", "unispeech-sat-base",
        "data2vec-audio-base", "whisper-tiny-encoder", "whisper-base-encoder", "ast-audioset"],
    "gnn": ["gcn-cora"],
    "recommender": ["dlrm-kaggle"],
}

BUILTIN_NAMES = [n for names in FAMILIES.values() for n in names]

SMALL_ZOO = ["resnet-50@small", "mobilenet-v2@small", "efficientnet-b0@small", "vit-base@small",
             "swin-tiny@small", "bert-base@small", "gpt2@small", "llama-3.2-1b@small",
             "wav2vec2-base@small", "lstm-lm-medium@small", "gcn-cora@small",
             "dlrm-kaggle@small"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The forwards here are tiny: on one thread they do not wait on OpenMP's barriers when the
    2 cores are busy with other work (which doubled this file's time on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def primary(out):
    """A forward's main tensor: itself, or a ModelOutput's first field."""
    return out if isinstance(out, torch.Tensor) else out[0]


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


# -- the built-in zoo --------------------------------------------------------------------------

def test_builtin_zoo_holds_its_families_in_order():
    zoo = load("builtin")
    assert [(e.name, e.family) for e in zoo] == [
        (n, f) for f, names in FAMILIES.items() for n in names]
    assert len(zoo) == 94 >= 65
    assert len({e.family for e in zoo}) == 11 >= 6
    assert catalog.builtin is zoo and zoo.system == {} and zoo.path is None
    for e in zoo:
        assert (e.task, e.batch_sizes, e.levels, e.options, e.timeout_s) == \
            ("inference", (1, 8), "ML", (), 600.0), e.name
        assert e.kind in ("hf", "python") and e.small, e.name


def test_builtin_zoo_passes_the_source_checks():
    """Config classes, their arguments (typos would be ignored by transformers), model classes,
    the configs themselves and the python: factories: what load() checks for a manifest."""
    catalog.check(load("builtin"), "builtin")
    catalog.check(load("builtin-small"), "builtin-small")


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_every_builtin_builds_small_and_runs(name):
    entry = load("builtin")[name]
    model, make_input = entry.build(small=True)
    assert not model.training
    x = make_input(2)
    with torch.no_grad():
        out = catalog.call(model, x)
    cls, shape = SMALL_OUTPUTS[name]
    assert (type(out).__name__, tuple(primary(out).shape)) == (cls, shape)
    assert torch.isfinite(primary(out)).all()
    again = make_input(2)             # the same inputs at every call
    if isinstance(x, dict):
        assert x.keys() == again.keys() and all(torch.equal(x[k], again[k]) for k in x)
    elif isinstance(x, tuple):
        assert all(torch.equal(a, b) for a, b in zip(x, again))
    else:
        assert torch.equal(x, again)


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_every_builtin_full_size_on_meta(name):
    """The full-size model's structure: its class and its parameter count."""
    model, make_input = load("builtin")[name].build(device="meta")
    params = sum(p.numel() for p in model.parameters())
    assert (type(model).__name__, params) == FULL[name]
    x = make_input(1)
    tensors = list(x.values()) if isinstance(x, dict) else list(x) if isinstance(x, tuple) \
        else [x]
    assert {t.device.type for t in tensors} == {"meta"}


def test_parameter_counts_follow_from_the_configs():
    """BERT's and GPT-2's counts computed from their config (V vocabulary, P positions, T token
    types, H hidden, I intermediate, L layers), against the built models'."""
    def bert(V=30522, P=512, T=2, H=768, I=3072, L=12):
        emb = (V + P + T) * H + 2 * H
        layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
        return emb + L * layer + H * H + H                  # + the pooler
    assert FULL["bert-base"][1] == bert() == 109_482_240
    assert FULL["bert-large"][1] == bert(H=1024, I=4096, L=24)

    def gpt2(V=50257, P=1024, H=768, L=12):
        layer = 2 * 2 * H + (3 * H * H + 3 * H) + (H * H + H) + (4 * H * H + 4 * H) + \
            (4 * H * H + H)
        return (V + P) * H + L * layer + 2 * H             # the LM head is tied
    assert FULL["gpt2"][1] == gpt2() == 124_439_808
    assert FULL["gpt2-medium"][1] == gpt2(H=1024, L=24)


@pytest.mark.parametrize("name, batch, cls, shape", [
    ("mobilenet-v2", 1, "ImageClassifierOutputWithNoAttention", (1, 1000)),
    ("electra-small", 2, "BaseModelOutputWithPastAndCrossAttentions", (2, 128, 256)),
    ("lstm-lm-small", 3, "Tensor", (3, 20, 10000)),
    ("gcn-cora", 1, "Tensor", (2708, 7)),
    ("dlrm-kaggle", 4, "Tensor", (4, 1)),
])
def test_cheap_builtins_run_at_full_size(name, batch, cls, shape):
    model, make_input = load("builtin")[name].build()
    with torch.no_grad():
        out = catalog.call(model, make_input(batch))
    assert (type(out).__name__, tuple(primary(out).shape)) == (cls, shape)


def test_builtin_small_is_the_shrunk_versions():
    small, full = load("builtin-small"), load("builtin")
    assert small.names == SMALL_ZOO
    assert catalog.builtin_small is small
    assert len({e.family for e in small}) == 9
    for e in small:
        base = full[e.name[:-len("@small")]]
        assert e == base.shrunk() and e.small == ()
        assert e.config_dict == {**base.config_dict, **base.small_dict["config"]}
        assert (e.batch_sizes, e.levels, e.task) == ((1, 8), "ML", "inference")
    # small versions are known names, in --models and in manifests, those of every built-in
    # entry included
    assert load("gpt2@small,bert-base,bert-large@small").entries == (
        small["gpt2@small"], full["bert-base"], full["bert-large"].shrunk())


def test_shrunk_and_build_small_are_one_thing():
    e = load("builtin")["bert-base"]
    s = e.shrunk()
    assert s.name == "bert-base@small" and s.shrunk() is s
    assert s.config_dict == {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                             "num_attention_heads": 2, "intermediate_size": 128}
    assert s.input_spec == {"seq_len": 32}
    a, _ = e.build(small=True)
    b, _ = s.build()
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(),
                                                 b.state_dict().values()))   # seeded


# -- manifests ---------------------------------------------------------------------------------

GOOD = """\
batch_sizes = [1, 4]
levels = "mlg"
timeout = 90
record_shapes = true

[system]
name = "bench-box"
price_per_hour = 1.25
gpus = ["H200"]

[[models]]
name = "resnet-50"                          # the built-in one
batch_sizes = [1, 32]

[[models]]
name = "bert-6l"
source = "hf:BertConfig"
config = {num_hidden_layers = 6, hidden_size = 256, num_attention_heads = 4}
input = {seq_len = 16, vocab = 100}
task = "train"
profile_memory = true
record_shapes = false

[[models]]
name = "tiny-mlp"
family = "mlp"
source = "python:models/mlp.py:make"
config = {width = 4}
input = "python:models/mlp.py:inputs"
small = {config = {width = 2}}

[[models]]
source = "timm:resnet50"
levels = "M"
"""

MLP = """\
import torch

def make(width=8):
    model = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 2))
    return model, lambda b: torch.ones(b, 3)

def inputs(batch_size):
    return torch.full((batch_size, 3), 2.0)
"""


@pytest.fixture
def manifest(tmp_path):
    (tmp_path / "models").mkdir()
    write(tmp_path / "models" / "mlp.py", MLP)
    return write(tmp_path / "zoo.toml", GOOD)


def test_manifest_entries(manifest, tmp_path):
    zoo = load(manifest)
    assert zoo.path == manifest
    assert zoo.system == {"name": "bench-box", "price_per_hour": 1.25, "gpus": ["H200"]}
    resnet, bert, mlp, timm = zoo.entries
    builtin = load("builtin")["resnet-50"]
    assert resnet == dataclasses.replace(builtin, batch_sizes=(1, 32), levels="MLG",
                                         timeout_s=90.0, options=(("record_shapes", True),))
    assert (bert.name, bert.family, bert.source, bert.task, bert.batch_sizes, bert.levels,
            bert.timeout_s, bert.options, bert.model_class) == (
        "bert-6l", "encoder", "hf:BertConfig", "train", (1, 4), "MLG", 90.0,
        (("profile_memory", True),), None)
    assert bert.config_dict == {"num_hidden_layers": 6, "hidden_size": 256,
                                "num_attention_heads": 4}
    assert bert.input_spec == {"seq_len": 16, "vocab": 100}
    assert bert.options_dict == {"record_shapes": False, "profile_memory": True,
                                 "with_stack": False}
    path = str(tmp_path / "models" / "mlp.py")
    assert (mlp.name, mlp.family, mlp.source, mlp.input) == (
        "tiny-mlp", "mlp", "python:%s:make" % path, "python:%s:inputs" % path)
    assert mlp.small_dict == {"config": {"width": 2}}
    assert (timm.name, timm.family, timm.source, timm.levels, timm.config) == (
        "timm:resnet50", "timm", "timm:resnet50", "M", ())
    assert repr(zoo) == "<xsp.zoo.Zoo 4 models (cnn, encoder, mlp, timm) from %s>" % manifest


def test_manifest_models_build(manifest):
    zoo = load(manifest)
    bert, mlp = zoo["bert-6l"], zoo["tiny-mlp"]
    model, make_input = bert.build()
    assert model.training and type(model).__name__ == "BertModel"
    assert model.config.num_hidden_layers == 6
    x = make_input(3)
    assert list(x) == ["input_ids"] and x["input_ids"].shape == (3, 16)
    assert x["input_ids"].dtype == torch.int64 and 0 <= int(x["input_ids"].min())
    assert int(x["input_ids"].max()) < 100
    loss = catalog.train_step(model, x)
    assert loss.ndim == 0 and model.encoder.layer[0].attention.self.query.weight.grad is not None

    model, make_input = mlp.build()
    assert not model.training and model[0].out_features == 4
    assert torch.equal(make_input(2), torch.full((2, 3), 2.0))     # the input factory
    assert catalog.call(model, make_input(2)).shape == (2, 2)
    small, _ = mlp.build(small=True)
    assert small[0].out_features == 2


def test_python_module_source(tmp_path):
    path = write(tmp_path / "zoo.toml", """\
        [[models]]
        name = "gru"
        source = "python:xsp.zoo.catalog:rnn_lm"
        [models.config]
        cell = "gru"
        vocab = 50
        embed = 8
        hidden = 8
        layers = 1
        seq_len = 3
        dropout = 0.0
        """)
    e = load(path)["gru"]
    assert (e.family, e.source) == ("python", "python:xsp.zoo.catalog:rnn_lm")
    model, make_input = e.build()
    assert type(model.rnn).__name__ == "GRU"
    assert catalog.call(model, make_input(2)).shape == (2, 3, 50)


def test_input_tables(tmp_path):
    mlp = write(tmp_path / "mlp.py", MLP)
    path = write(tmp_path / "zoo.toml", """\
        [[models]]
        name = "floats"
        source = "python:mlp.py:make"
        input = {shape = [3], dtype = "float64"}
        [[models]]
        name = "ids"
        source = "python:mlp.py:make"
        input = {shape = [2, 5], dtype = "int32", vocab = 7, name = "ids"}
        [[models]]
        name = "no-vocab"
        source = "python:mlp.py:make"
        input = {seq_len = 4}
        """)
    zoo = load(path)
    x = zoo["floats"].build()[1](2)
    assert x.shape == (2, 3) and x.dtype == torch.float64
    x = zoo["ids"].build()[1](4)
    assert list(x) == ["ids"] and x["ids"].shape == (4, 2, 5) and x["ids"].dtype == torch.int32
    assert 0 <= int(x["ids"].min()) and int(x["ids"].max()) < 7
    with pytest.raises(ZooError) as err:
        zoo["no-vocab"].build()
    assert str(err.value) == "no-vocab: an integer input needs input.vocab (the ids' upper bound)"
    assert os.path.isfile(mlp)


def test_hf_input_from_the_config(tmp_path):
    """What an input table leaves out comes from the config: the shape of an image of its
    image_size, 128 token ids; a name of the model's main input."""
    path = write(tmp_path / "zoo.toml", """\
        [[models]]
        name = "vit"
        source = "hf:ViTConfig"
        input = {dtype = "float64"}
        [models.config]
        hidden_size = 32
        num_hidden_layers = 1
        num_attention_heads = 2
        intermediate_size = 64
        image_size = 48
        patch_size = 16
        [[models]]
        name = "bert"
        source = "hf:BertConfig"
        [models.config]
        hidden_size = 32
        num_hidden_layers = 1
        num_attention_heads = 2
        intermediate_size = 64
        vocab_size = 50
        """)
    zoo = load(path)
    x = zoo["vit"].build()[1](2)
    assert list(x) == ["pixel_values"] and x["pixel_values"].shape == (2, 3, 48, 48)
    assert x["pixel_values"].dtype == torch.float64
    model, make_input = zoo["bert"].build()
    x = make_input(1)
    assert list(x) == ["input_ids"] and x["input_ids"].shape == (1, 128)
    assert int(x["input_ids"].max()) < 50
    with torch.no_grad():
        assert model(**x).last_hidden_state.shape == (1, 128, 32)


BAD = [
    # (manifest text, message after "PATH: "; DIR stands for the manifest's folder)
    ('batch_size = [1]\n[[models]]\nname = "bert-base"\n',
     "batch_size: unknown key (did you mean 'batch_sizes'?); known: batch_sizes, levels, task, "
     "timeout, record_shapes, profile_memory, with_stack, system, models"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nbatchsizes = [1]\n',
     "model 'x': batchsizes: unknown key (did you mean 'batch_sizes'?); known: name, family, "
     "source, model_class, config, input, task, batch_sizes, levels, timeout, record_shapes, "
     "profile_memory, with_stack, small"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nbatch_sizes = [0, 2]\n',
     "model 'x': batch_sizes: expected a non-empty list of positive integers, got [0, 2]"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nbatch_sizes = []\n',
     "model 'x': batch_sizes: expected a non-empty list of positive integers, got []"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nbatch_sizes = [1, true]\n',
     "model 'x': batch_sizes: expected a non-empty list of positive integers, got [1, True]"),
    ('batch_sizes = [8, 8]\n[[models]]\nname = "bert-base"\n',
     "batch_sizes: a batch size is listed twice: [8, 8]"),
    ('batch_sizes = 8\n[[models]]\nname = "bert-base"\n',
     "batch_sizes: expected a non-empty list of positive integers, got 8"),
    ('levels = "LM"\n[[models]]\nname = "bert-base"\n',
     "levels: expected one of 'M', 'ML', 'MLG', got 'LM'"),
    ('[[models]]\nname = "bert-base"\ntask = "training"\n',
     "model 'bert-base': task: expected one of 'inference', 'train', got 'training'"),
    ('timeout = -1\n[[models]]\nname = "bert-base"\n',
     "timeout: expected a positive number of seconds, got -1"),
    ('[[models]]\nname = "bert-base"\ntimeout = "1h"\n',
     "model 'bert-base': timeout: expected a positive number of seconds, got '1h'"),
    ('[[models]]\nname = "bert-base"\nrecord_shapes = "yes"\n',
     "model 'bert-base': record_shapes: expected true or false, got 'yes'"),
    ('system = 3\n[[models]]\nname = "bert-base"\n', "system: expected a table, got an integer"),
    ('levels = "ML"\n', "models: the manifest lists no models ([[models]] tables)"),
    ('models = ["bert-base"]\n', "models: expected [[models]] tables, got a list"),
    ('[[models]]\nfamily = "cnn"\n',
     "model #1: source: a model needs a source (or a built-in name)"),
    ('[[models]]\nname = 7\nsource = "hf:BertConfig"\n',
     "model 'hf:BertConfig': name: expected a non-empty string, got 7"),
    ('[[models]]\nname = "bert-bse"\n',
     "model 'bert-bse': name: unknown model: not a built-in one (did you mean 'bert-base'?); "
     "give a source (hf:, timm:, torchvision:, python:) for a model of your own"),
    ('[[models]]\nname = "bert-base"\n[[models]]\nname = "bert-base"\n',
     "model 'bert-base': name: two models have this name"),
    ('[[models]]\nname = "x"\nsource = "onnx:resnet"\n',
     "model 'x': source: unknown source kind 'onnx'; known: hf, timm, torchvision, python"),
    ('[[models]]\nname = "x"\nsource = "resnet"\n',
     "model 'x': source: expected KIND:WHAT with KIND one of hf, timm, torchvision, python, "
     "got 'resnet'"),
    ('[[models]]\nname = "x"\nsource = "hf:"\n',
     "model 'x': source: 'hf:' names nothing after hf:"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfg"\n',
     "model 'x': source: unknown config class 'BertConfg': transformers %s has no such "
     "configuration class (did you mean 'BertConfig'?)" % TRANSFORMERS),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nconfig = {hiden_size = 3}\n',
     "model 'x': config.hiden_size: unknown config argument: neither BertConfig nor its "
     "model's code has it"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nsmall = {config = {layers = 1}}\n',
     "model 'x': small.config.layers: unknown config argument: neither BertConfig nor its "
     "model's code has it"),
    ('[[models]]\nname = "x"\nsource = "hf:ResNetConfig"\nconfig = {layer_type = "tiny"}\n',
     "model 'x': config: ResNetConfig refuses it: Class validation error for validator "
     "'validate_layer_type': ValueError: layer_type=tiny is not one of basic,bottleneck"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nconfig = 3\n',
     "model 'x': config: expected a table, got an integer"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\n'
     'model_class = "AutoModelForImageClassification"\n',
     "model 'x': model_class: AutoModelForImageClassification has no model for BertConfig"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nmodel_class = "BertModle"\n',
     "model 'x': model_class: unknown model class 'BertModle': transformers %s has no such "
     "class" % TRANSFORMERS),
    ('[[models]]\nname = "x"\nsource = "timm:resnet50"\nmodel_class = "AutoModel"\n',
     "model 'x': model_class: only hf: sources take a model class"),
    ('[[models]]\nsource = "timm:resnet50"\nconfig = {depth = 3}\n',
     "model 'timm:resnet50': config: timm: sources take no config"),
    ('[[models]]\nname = "x"\nsource = "python:nope.py:make"\n',
     "model 'x': source: DIR/nope.py: no such file"),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py:maker"\n',
     "model 'x': source: DIR/mlp.py defines no function 'maker'"),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py:make"\nconfig = {depth = 3}\n',
     "model 'x': config.depth: make() takes no argument 'depth' (it takes width)"),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py:make"\nsmall = {config = {w = 1}}\n',
     "model 'x': small.config.w: make() takes no argument 'w' (it takes width)"),
    ('[[models]]\nname = "x"\nsource = "python:broken.py:make"\n',
     "model 'x': source: DIR/broken.py cannot be parsed: invalid syntax (broken.py, line 1)"),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py"\n',
     "model 'x': source: expected python:FILE.py:FUNCTION or python:package.module:FUNCTION, "
     "got 'python:mlp.py'"),
    ('[[models]]\nname = "x"\nsource = "python:no_such_module.sub:make"\n',
     "model 'x': source: module 'no_such_module.sub' cannot be found: No module named "
     "'no_such_module'"),
    ('[[models]]\nname = "x"\nsource = "python:xsp.zoo.catalog:nothing"\n',
     "model 'x': source: %s/xsp/zoo/catalog.py defines no function 'nothing'" % ROOT),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py:make"\ninput = "python:mlp.py:nothing"\n',
     "model 'x': input: DIR/mlp.py defines no function 'nothing'"),
    ('[[models]]\nname = "x"\nsource = "python:mlp.py:make"\ninput = {dtype = "float64"}\n',
     "model 'x': input: give its shape or seq_len: a python: source's input has nothing to be "
     "taken from"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {seq_len = 0}\n',
     "model 'x': input.seq_len: expected a positive integer, got 0"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {size = [3]}\n',
     "model 'x': input.size: unknown key; known: shape, dtype, seq_len, vocab, name"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {shape = [3, -1]}\n',
     "model 'x': input.shape: expected a list of positive integers (without the batch), "
     "got [3, -1]"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {shape = [3], seq_len = 3}\n',
     "model 'x': input: give shape or seq_len, not both"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {shape = [3], dtype = "int8"}\n',
     "model 'x': input.dtype: expected one of float32, float16, bfloat16, float64, int64, "
     "int32, got 'int8'"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = {shape = [3], name = "1x"}\n',
     "model 'x': input.name: expected a keyword name of the forward, got '1x'"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\ninput = [3, 224, 224]\n',
     "model 'x': input: expected a table (shape, dtype, seq_len, vocab, name) or a "
     "python:FILE.py:FUNC factory, got a list"),
    ('[[models]]\nname = "x"\nsource = "hf:BertConfig"\nsmall = {inputs = {seq_len = 8}}\n',
     "model 'x': small.inputs: unknown key (did you mean 'input'?); known: config, input"),
    ('[[models]\nname = "x"\n',
     "not valid TOML: Expected ']]' at the end of an array declaration (at line 1, column 9)"),
]


@pytest.mark.parametrize("text, message", BAD, ids=range(len(BAD)))
def test_bad_manifests(tmp_path, text, message):
    write(tmp_path / "mlp.py", MLP)
    write(tmp_path / "broken.py", "def make(:\n")
    path = write(tmp_path / "zoo.toml", text)
    with pytest.raises(ZooError) as err:
        load(path)
    assert str(err.value) == "%s: %s" % (path, message.replace("DIR", str(tmp_path)))
    assert isinstance(err.value, ValueError) and err.value.where == path


def test_error_names_model_and_field(tmp_path):
    path = write(tmp_path / "zoo.toml",
                 '[[models]]\nname = "x"\nsource = "hf:BertConfig"\nlevels = "G"\n')
    with pytest.raises(ZooError) as err:
        load(path)
    assert (err.value.where, err.value.model, err.value.field) == (path, "x", "levels")


def test_missing_manifest(tmp_path):
    path = str(tmp_path / "nope.toml")
    with pytest.raises(ZooError) as err:
        load(path)
    assert str(err.value) == "%s: no such manifest" % path


# -- --models strings --------------------------------------------------------------------------

def test_models_string_equals_the_manifest(tmp_path, monkeypatch):
    write(tmp_path / "mlp.py", MLP)
    path = write(tmp_path / "zoo.toml", """\
        [[models]]
        name = "resnet-50"
        [[models]]
        source = "hf:BertConfig"
        [[models]]
        source = "python:mlp.py:make"
        [[models]]
        source = "torchvision:resnet18"
        """)
    monkeypatch.chdir(tmp_path)
    text = "resnet-50, hf:BertConfig,python:mlp.py:make ,torchvision:resnet18"
    assert load(text).entries == load(path).entries
    zoo = load(text)
    assert zoo.path is None and zoo.system == {}
    assert zoo.names == ["resnet-50", "hf:BertConfig", "python:mlp.py:make",
                         "torchvision:resnet18"]
    assert zoo["resnet-50"] == load("builtin")["resnet-50"]
    bert = zoo["hf:BertConfig"]     # the family of the built-in entries of its config class
    assert (bert.family, bert.model_class, bert.config, bert.input) == ("encoder", None, (), None)
    assert zoo["python:mlp.py:make"].source == "python:%s:make" % (tmp_path / "mlp.py")


def test_models_string_expands_the_builtin_zoos():
    assert load("builtin-small,bert-base").names == SMALL_ZOO + ["bert-base"]
    assert load("builtin").names == BUILTIN_NAMES
    assert load("builtin-small").entries == load(",".join(SMALL_ZOO)).entries


@pytest.mark.parametrize("text, message", [
    ("", "--models: empty: give built-in names or sources, comma-separated"),
    ("bert-base,,gpt2", "--models: item 2 is empty"),
    ("bert-base,gpt3", "--models: model 'gpt3': name: unknown model: not a built-in one (did "
     "you mean 'gpt2'?); give a source (hf:, timm:, torchvision:, python:) for a model of your "
     "own"),
    ("onnx:resnet50", "--models: model 'onnx:resnet50': source: unknown source kind 'onnx'; "
     "known: hf, timm, torchvision, python"),
    ("hf:ResnetConfig", "--models: model 'hf:ResnetConfig': source: unknown config class "
     "'ResnetConfig': transformers %s has no such configuration class (did you mean "
     "'ResNetConfig'?)" % TRANSFORMERS),
    ("bert-base,builtin-small,bert-base", "--models: model 'bert-base': name: two models have "
     "this name"),
    ("python:missing.py:make", "--models: model 'python:missing.py:make': source: "
     "CWD/missing.py: no such file"),
])
def test_bad_models_strings(tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ZooError) as err:
        load(text)
    assert str(err.value) == message.replace("CWD", str(tmp_path))


# -- sources whose package does not import here ------------------------------------------------

@pytest.mark.parametrize("kind, why", [
    ("timm", "timm needs torchvision, whose PyPI wheels are CUDA builds that do not load "
             "against a CPU build of torch; timm: sources build where timm imports"),
    ("torchvision", "torchvision's PyPI wheels are CUDA builds that do not load against a CPU "
                    "build of torch; torchvision: sources build where it imports"),
])
def test_timm_and_torchvision_parse_and_fail_at_build(monkeypatch, kind, why):
    monkeypatch.setitem(sys.modules, kind, None)       # an import that fails, on any machine
    e = load("%s:resnet50" % kind)["%s:resnet50" % kind]
    assert (e.family, e.kind) == (kind, kind)
    with pytest.raises(ZooError) as err:
        e.build()
    assert str(err.value) == ("%s:resnet50: %s:resnet50: the package %s cannot be imported "
                              "here (import of %s halted; None in sys.modules): %s" % (
                                  kind, kind, kind, kind, why))
    assert (err.value.model, err.value.field) == ("%s:resnet50" % kind, "source")


def test_hf_sources_without_transformers_fail_at_build(monkeypatch):
    e = load("builtin")["bert-base"]
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ZooError) as err:
        e.build(small=True)
    assert str(err.value) == ("bert-base@small: hf:BertConfig: the package transformers cannot "
                              "be imported here (import of transformers halted; None in "
                              "sys.modules): install xsp's zoo extra: pip install 'xsp[zoo]'")


def test_a_factory_that_returns_something_else(tmp_path):
    write(tmp_path / "bad.py", "def make():\n    return 3\n")
    path = write(tmp_path / "zoo.toml", '[[models]]\nname = "x"\nsource = "python:bad.py:make"\n')
    with pytest.raises(ZooError) as err:
        load(path)["x"].build()
    assert str(err.value) == "x: python:%s:make returned int, not (model, make_input)" % (
        tmp_path / "bad.py")


# -- keys --------------------------------------------------------------------------------------

def test_key_is_stable():
    """The digest is of canonical JSON: the same in every process, Python and machine."""
    zoo = load("builtin")
    assert zoo["resnet-50"].key() == RESNET50_KEY
    assert zoo["lstm-lm-medium"].key() == LSTM_KEY
    code = "from xsp.zoo import catalog; print(catalog.load('builtin')['resnet-50'].key())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == RESNET50_KEY


def test_key_follows_what_is_evaluated():
    e = load("builtin")["bert-base"]
    same = [dataclasses.replace(e, batch_sizes=(2,)), dataclasses.replace(e, levels="MLG"),
            dataclasses.replace(e, timeout_s=5.0), dataclasses.replace(e, family="other")]
    assert {x.key() for x in same} == {e.key()}
    changed = [
        dataclasses.replace(e, name="bert"),
        dataclasses.replace(e, source="hf:RobertaConfig"),
        dataclasses.replace(e, config=catalog._freeze({"num_hidden_layers": 6})),
        dataclasses.replace(e, input=catalog._freeze({"seq_len": 64})),
        dataclasses.replace(e, task="train"),
        dataclasses.replace(e, options=(("record_shapes", True),)),
        dataclasses.replace(e, model_class="BertForMaskedLM"),
        e.shrunk(),
    ]
    keys = [x.key() for x in changed]
    assert len(set(keys)) == len(keys) and e.key() not in keys


def test_key_from_a_manifest_is_the_builtins_when_nothing_changes(tmp_path):
    path = write(tmp_path / "zoo.toml", """\
        [[models]]
        name = "bert-base"
        batch_sizes = [1, 2, 4]
        [[models]]
        name = "gpt2"
        config = {n_layer = 6}
        [[models]]
        name = "vit-base"
        profile_memory = true
        """)
    zoo, builtin = load(path), load("builtin")
    assert zoo["bert-base"].key() == builtin["bert-base"].key()
    assert zoo["gpt2"].config_dict == {"n_layer": 6}
    assert zoo["gpt2"].key() != builtin["gpt2"].key()
    assert zoo["vit-base"].key() != builtin["vit-base"].key()


# -- the rest of the API -----------------------------------------------------------------------

def test_entries_and_zoos_pickle():
    """A worker process receives its entry pickled (spawned, not forked)."""
    for zoo in (load("builtin"), load("builtin-small")):
        back = pickle.loads(pickle.dumps(zoo))
        assert back == zoo and [e.key() for e in back] == [e.key() for e in zoo]
        assert hash(back.entries) == hash(zoo.entries)
    e = load("builtin")["deberta-v3-base"]
    assert type(pickle.loads(pickle.dumps(e)).config) is type(e.config)


def test_list_text():
    assert catalog.list_text(load("resnet-50,gpt2@small,lstm-lm-small")) == (
        "resnet-50      cnn      hf:ResNetConfig                1,8\n"
        "gpt2@small     decoder  hf:GPT2Config                  1,8\n"
        "lstm-lm-small  rnn      python:xsp.zoo.catalog:rnn_lm  1,8\n")
    assert catalog.list_text(Zoo(())) == ""


def test_override():
    zoo = load("bert-base,gpt2").override(batch_sizes=[2, 4], levels="m", task="train",
                                          timeout=30, options={"with_stack": True})
    for e in zoo:
        assert (e.batch_sizes, e.levels, e.task, e.timeout_s, e.options) == (
            (2, 4), "M", "train", 30.0, (("with_stack", True),))
    with pytest.raises(ZooError) as err:
        zoo.override(batch_sizes=[0])
    assert str(err.value) == ("override: batch_sizes: expected a non-empty list of positive "
                              "integers, got [0]")
    with pytest.raises(ZooError) as err:
        zoo.override(options={"record_shape": True})
    assert str(err.value) == ("override: options.record_shape: unknown key (did you mean "
                              "'record_shapes'?); known: record_shapes, profile_memory, "
                              "with_stack")


def test_train_task_builds_in_train_mode():
    zoo = load("lstm-lm-small@small").override(task="train")
    model, make_input = zoo.entries[0].build()
    assert model.training
    loss = catalog.train_step(model, make_input(2))
    assert loss.ndim == 0 and all(p.grad is not None for p in model.parameters())
    assert catalog.loss_of((torch.ones(2), torch.zeros(1))).item() == 1.0
    with pytest.raises(TypeError):
        catalog.loss_of({"ids": torch.ones(2, dtype=torch.int64)})


def test_load_refuses_what_is_not_a_zoo():
    with pytest.raises(ZooError) as err:
        load(3)
    assert str(err.value) == ("a zoo is 'builtin', 'builtin-small', a .toml manifest or a "
                              "--models string, not 3")


def test_import_xsp_leaves_the_catalog_alone():
    code = ("import sys, xsp; "
            "print('xsp.zoo.catalog' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]
