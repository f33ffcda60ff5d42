#include "io/model_card.h"

#include "common/error.h"
#include "common/fileio.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each trainer's _name and _paper, as TRL 1.9 declares them (trl/trainer/<method>_trainer.py,
 * trl/experimental/{orpo,cpo}). SFT has no paper. */
static const struct {
    const char *tag, *name, *title, *paper_id, *citation;
} trainers[] = {
    {"sft", "SFT", NULL, NULL, NULL},
    {"dpo", "DPO", "Direct Preference Optimization: Your Language Model is Secretly a Reward Model",
     "2305.18290",
     "@inproceedings{rafailov2023direct,\n"
     "    title        = {{Direct Preference Optimization: Your Language Model is Secretly a "
     "Reward Model}},\n"
     "    author       = {Rafael Rafailov and Archit Sharma and Eric Mitchell and Christopher D. "
     "Manning and Stefano Ermon and Chelsea Finn},\n"
     "    year         = 2023,\n"
     "    booktitle    = {Advances in Neural Information Processing Systems 36: Annual Conference "
     "on Neural Information Processing Systems 2023, NeurIPS 2023, New Orleans, LA, USA, December "
     "10 - 16, 2023},\n"
     "    url          = "
     "{http://papers.nips.cc/paper_files/paper/2023/hash/"
     "a85b405ed65c6477a4fe8302b5e06ce7-Abstract-Conference.html},\n"
     "    editor       = {Alice Oh and Tristan Naumann and Amir Globerson and Kate Saenko and "
     "Moritz Hardt and Sergey Levine},\n"
     "}"},
    {"kto", "KTO", "KTO: Model Alignment as Prospect Theoretic Optimization", "2402.01306",
     "@article{ethayarajh2024kto,\n"
     "    title        = {{KTO: Model Alignment as Prospect Theoretic Optimization}},\n"
     "    author       = {Kawin Ethayarajh and Winnie Xu and Niklas Muennighoff and Dan Jurafsky "
     "and Douwe Kiela},\n"
     "    year         = 2024,\n"
     "    eprint       = {arXiv:2402.01306},\n"
     "}"},
    {"orpo", "ORPO", "ORPO: Monolithic Preference Optimization without Reference Model",
     "2403.07691",
     "@article{hong2024orpo,\n"
     "    title        = {{ORPO: Monolithic Preference Optimization without Reference Model}},\n"
     "    author       = {Jiwoo Hong and Noah Lee and James Thorne},\n"
     "    year         = 2024,\n"
     "    eprint       = {arXiv:2403.07691}\n"
     "}"},
    {"cpo", "CPO",
     "Contrastive Preference Optimization: Pushing the Boundaries of LLM Performance in Machine "
     "Translation",
     "2401.08417",
     "@inproceedings{xu2024contrastive,\n"
     "    title        = {{Contrastive Preference Optimization: Pushing the Boundaries of LLM "
     "Performance in Machine Translation}},\n"
     "    author       = {Haoran Xu and Amr Sharaf and Yunmo Chen and Weiting Tan and Lingfeng "
     "Shen and Benjamin Van Durme and Kenton Murray and Young Jin Kim},\n"
     "    year         = 2024,\n"
     "    booktitle    = {Forty-first International Conference on Machine Learning, {ICML} "
     "2024, Vienna, Austria, July 21-27, 2024},\n"
     "    publisher    = {OpenReview.net},\n"
     "    url          = {https://openreview.net/forum?id=51iwkioZpn}\n"
     "}"},
    {"grpo", "GRPO",
     "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
     "2402.03300",
     "@article{shao2024deepseekmath,\n"
     "    title        = {{DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open "
     "Language Models}},\n"
     "    author       = {Zhihong Shao and Peiyi Wang and Qihao Zhu and Runxin Xu and Junxiao "
     "Song and Mingchuan Zhang and Y. K. Li and Y. Wu and Daya Guo},\n"
     "    year         = 2024,\n"
     "    eprint       = {arXiv:2402.03300},\n"
     "}"},
};

/* A YAML scalar as yaml.dump writes a plain one, or double-quoted (JSON's escapes are YAML's)
 * when it holds anything a plain scalar could misread. */
static void yaml_scalar(FILE *f, const char *s) {
    bool plain = *s && (isalnum((unsigned char)*s) || *s == '_' || *s == '/');
    for (const char *p = s; plain && *p; p++)
        plain = isalnum((unsigned char)*p) || strchr("._/-", *p);
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void yaml_key(FILE *f, const char *key, const char *value) {
    fprintf(f, "%s: ", key);
    yaml_scalar(f, value);
    fputc('\n', f);
}

static void front_matter(FILE *f, const ModelCard *c) {
    /* ModelCardData's field order; None values are left out */
    fputs("---\n", f);
    if (c->base_model) yaml_key(f, "base_model", c->base_model);
    if (c->n_datasets > 0) {
        fputs("datasets:\n", f);
        for (int i = 0; i < c->n_datasets; i++) {
            fputs("- ", f);
            yaml_scalar(f, c->datasets[i]);
            fputc('\n', f);
        }
    }
    yaml_key(f, "library_name", c->adapter ? "peft" : "transformers");
    yaml_key(f, "model_name", c->model_name);
    fputs("tags:\n- generated_from_trainer\n- trl\n", f);
    fprintf(f, "- %s\n", c->method);
    if (c->adapter) fputs("- lora\n", f);
    fputs("licence: license\n---\n\n", f);
}

static void metrics_section(FILE *f, const json_t *metrics) {
    if (!metrics || json_object_size(metrics) == 0) return;
    fputs("### Training results\n\nThe final metrics of the run:\n\n| metric | value |\n"
          "|---|---|\n",
          f);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)metrics, key, v) {
        if (json_is_integer(v))
            fprintf(f, "| %s | %lld |\n", key, (long long)json_integer_value(v));
        else if (json_is_number(v))
            fprintf(f, "| %s | %.6g |\n", key, json_number_value(v));
    }
    fputc('\n', f);
}

int model_card_write(const ModelCard *c, const char *dir) {
    int t = -1;
    for (size_t i = 0; i < sizeof trainers / sizeof *trainers; i++)
        if (strcmp(trainers[i].tag, c->method) == 0) t = (int)i;
    const char *name = t >= 0 ? trainers[t].name : c->method;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return err_set("%s/README.md: out of memory", dir);
    front_matter(f, c);
    fprintf(f, "# Model Card for %s\n\n", c->model_name);
    if (c->base_model)
        fprintf(f, "This model is a fine-tuned version of [%s](https://huggingface.co/%s)",
                c->base_model, c->base_model);
    else
        fprintf(f, "This model is a fine-tuned version of the local model `%s`",
                c->base_path ? c->base_path : "?");
    if (c->n_datasets == 1)
        fprintf(f, " on the [%s](https://huggingface.co/datasets/%s) dataset", c->datasets[0],
                c->datasets[0]);
    fputs(".\nIt has been trained using rlhf.c, which implements the trainers of "
          "[TRL](https://github.com/huggingface/trl) in C.\n\n",
          f);
    fprintf(f,
            "## Quick start\n\n```python\nfrom transformers import pipeline\n\n"
            "question = \"If you had a time machine, but could only go to the past or the future "
            "once and never return, which would you choose and why?\"\n"
            "generator = pipeline(\"text-generation\", model=\"%s\", device=\"cuda\")\n"
            "output = generator([{\"role\": \"user\", \"content\": question}], "
            "max_new_tokens=128, return_full_text=False)[0]\n"
            "print(output[\"generated_text\"])\n```\n\n",
            c->hub_model_id ? c->hub_model_id : c->model_name);
    fprintf(f, "## Training procedure\n\nThis model was trained with %s", name);
    if (t >= 0 && trainers[t].paper_id)
        fprintf(f, ", a method introduced in [%s](https://huggingface.co/papers/%s)",
                trainers[t].title, trainers[t].paper_id);
    fputs(".\n\n", f);
    metrics_section(f, c->metrics);
    fputs("### Framework versions\n\n- rlhf.c (C, CPU), API version 1\n"
          "- TRL semantics: 1.9\n\n## Citations\n\n",
          f);
    if (t >= 0 && trainers[t].citation)
        fprintf(f, "Cite %s as:\n\n```bibtex\n%s\n```\n\n", name, trainers[t].citation);
    fputs("Cite TRL as:\n    \n```bibtex\n@software{vonwerra2020trl,\n"
          "  title   = {{TRL: Transformers Reinforcement Learning}},\n"
          "  author  = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, "
          "Edward and Thrush, Tristan and Lambert, Nathan and Huang, Shengyi and Rasul, Kashif "
          "and Gallou\xc3\xa9"
          "dec, Quentin},\n"
          "  license = {Apache-2.0},\n  url     = {https://github.com/huggingface/trl},\n"
          "  year    = {2020}\n}\n```\n",
          f);
    if (fclose(f) != 0) {
        free(text);
        return err_set("%s/README.md: out of memory", dir);
    }
    char path[PATH_MAX];
    int rc = path_join(path, sizeof path, dir, "README.md");
    if (rc == 0) rc = write_file_atomic(path, text, len);
    free(text);
    return rc;
}
