/* grpo/vllm_server.h over libcurl: one easy handle (one connection, kept alive) per run. */
#include "grpo/vllm_server.h"

#include "common/error.h"
#include "common/json_util.h"

#include <cblas.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct VllmServer {
    char *url; /* base URL, no trailing slash */
    CURL *curl;
    int64_t pushed; /* the version whose weights the server holds; pushed_any false: none */
    bool pushed_any;
};

/* A response body as it arrives. */
typedef struct {
    char *data;
    size_t len;
} Buffer;

static size_t collect(char *ptr, size_t size, size_t n, void *arg) {
    Buffer *b = arg;
    size_t add = size * n;
    b->data = xrealloc(b->data, b->len + add + 1);
    memcpy(b->data + b->len, ptr, add);
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

/* One request: GET when neither body nor upload is given, else POST of body (body_len bytes,
 * content type `type`) or of the file `upload` (upload_len bytes). *status receives the HTTP
 * status and *reply the body (malloc'd, NUL-terminated; the caller frees). Returns 0 when an
 * answer came (any status), or -1 with an error naming the URL. */
static int request(VllmServer *s, const char *path, const char *body, size_t body_len,
                   const char *type, FILE *upload, curl_off_t upload_len, long connect_timeout_s,
                   long *status, char **reply) {
    char url[1200];
    snprintf(url, sizeof url, "%s%s", s->url, path);
    Buffer b = {0};
    CURL *c = s->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, connect_timeout_s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    struct curl_slist *headers = NULL;
    if (body || upload) {
        char header[128];
        snprintf(header, sizeof header, "Content-Type: %s", type);
        headers = curl_slist_append(headers, header);
        headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        if (upload) {
            curl_easy_setopt(c, CURLOPT_READDATA, upload);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, upload_len);
        } else {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
    }
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        free(b.data);
        return err_set("%s: %s", url, curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    *reply = b.data ? b.data : xstrdup("");
    return 0;
}

/* The message of an error answer: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the
 * body as it is (cut). Writes into out. */
static void answer_message(const char *reply, char *out, size_t size) {
    json_t *root = json_loads(reply, 0, NULL);
    const json_t *err = json_object_get(root, "error");
    const char *m = json_string_value(json_object_get(err, "message"));
    if (!m) m = json_string_value(json_object_get(root, "detail"));
    snprintf(out, size, "%.300s", m ? m : reply);
    json_decref(root);
}

int vllm_server_open(VllmServer **out, const GrpoConfig *g, FILE *log) {
    *out = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return err_set("key 'trl.vllm_mode': libcurl could not be initialised");
    VllmServer *s = xcalloc(1, sizeof *s);
    s->url = xstrdup(g->vllm_server_url);
    s->curl = curl_easy_init();
    if (!s->curl) {
        vllm_server_close(s);
        return err_set("key 'trl.vllm_mode': libcurl could not make a handle");
    }
    /* TRL's check_server: GET /health/ until it answers 200 or the timeout passes */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char last[600] = "no answer";
    for (;;) {
        long status = 0;
        char *reply = NULL;
        if (request(s, "/health/", NULL, 0, NULL, NULL, 0, 5, &status, &reply) == 0) {
            free(reply);
            if (status == 200) break;
            snprintf(last, sizeof last, "GET /health/ answered %ld", status);
        } else {
            snprintf(last, sizeof last, "%.500s", err_msg());
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double waited = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
        if (waited >= g->vllm_server_timeout) {
            vllm_server_close(s);
            return err_set("key 'trl.vllm_mode': server: the generation server at %s did not "
                           "answer within %g s (trl.vllm_server_timeout): %s. Start it first, "
                           "e.g. `rlhf serve MODEL --port 8000`",
                           g->vllm_server_url, g->vllm_server_timeout, last);
        }
        usleep(200 * 1000);
    }
    long status = 0;
    char *reply = NULL;
    if (request(s, "/get_world_size/", NULL, 0, NULL, NULL, 0, 10, &status, &reply) != 0) {
        vllm_server_close(s);
        return err_prefix("key 'trl.vllm_mode'");
    }
    json_t *root = json_loads(reply, 0, NULL);
    json_int_t world = json_integer_value(json_object_get(root, "world_size"));
    json_decref(root);
    free(reply);
    if (status != 200 || world != 1) {
        vllm_server_close(s);
        return err_set("key 'trl.vllm_mode': the server at %s answered GET /get_world_size/ with "
                       "status %ld, world size %lld: rlhf.c generates on one `rlhf serve` "
                       "process (world size 1)",
                       g->vllm_server_url, status, (long long)world);
    }
    fprintf(log,
            "generation: on the server at %s (vllm_mode: server); weights pushed over HTTP "
            "before each generation that follows an optimizer step\n",
            g->vllm_server_url);
    *out = s;
    return 0;
}

void vllm_server_close(VllmServer *s) {
    if (!s) return;
    if (s->curl) curl_easy_cleanup(s->curl);
    free(s->url);
    free(s);
}

/* Writes m's parameters in fp32 to path, an attached (enabled) adapter merged into the matrices
 * it adapts, W + scaling * B A, as PEFT's merge_adapter (what TRL does before it sends a PEFT
 * model's weights to vLLM): the server holds a plain model that computes what base + adapter
 * computes here. */
static int write_weights(const Model *m, const char *path) {
    const LoraAdapter *a = m->lora;
    if (!a || !a->enabled) return model_save_safetensors(m, path, ST_F32);
    if (a->n_layers != m->cfg.n_layers) return err_set("the adapter does not fit the model");
    int n = m->n_param_tensors;
    SafetensorsWriteTensor *t = xcalloc((size_t)(n ? n : 1), sizeof *t);
    float **merged = xcalloc((size_t)(n ? n : 1), sizeof *merged);
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &m->param_info[i];
        t[i] = (SafetensorsWriteTensor){
            p->name, ST_F32, p->ndim, {p->shape[0], p->shape[1]}, m->params + p->offset};
    }
    int rc = 0;
    for (int l = 0; l < a->n_layers && rc == 0; l++) {
        const LayerWeights *w = &m->layers[l];
        const float *weights[LORA_N_MODULES] = {w->wq,     w->wk,   w->wv,    w->wo,
                                                w->w_gate, w->w_up, w->w_down};
        for (int mod = 0; mod < LORA_N_MODULES && rc == 0; mod++) {
            const LoraLinear *lin = &a->linears[l * LORA_N_MODULES + mod];
            if (!lin->A) continue;
            int i = 0;
            while (i < n && m->params + m->param_info[i].offset != weights[mod])
                i++;
            if (i == n || m->param_info[i].numel != (size_t)lin->out * (size_t)lin->in) {
                rc = err_set("layer %d %s: the adapted matrix is not a parameter of the model", l,
                             lora_module_name((LoraModule)mod));
                break;
            }
            merged[i] = xmalloc(m->param_info[i].numel * sizeof(float));
            memcpy(merged[i], weights[mod], m->param_info[i].numel * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, lin->out, lin->in, a->r,
                        a->scaling, lin->B, a->r, lin->A, lin->in, 1.0f, merged[i], lin->in);
            t[i].data = merged[i];
        }
    }
    if (rc == 0) rc = safetensors_write(path, t, (size_t)n);
    for (int i = 0; i < n; i++)
        free(merged[i]);
    free(merged);
    free(t);
    return rc;
}

int vllm_server_sync(VllmServer *s, const Model *m, int64_t version) {
    if (s->pushed_any && version >= 0 && version == s->pushed) return 0;
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/rlhf-weights-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return err_set("pushing the weights to %s: cannot make a file in %s", s->url, path);
    close(fd);
    int rc = write_weights(m, path);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    long status = 0, size = -1;
    char *reply = NULL;
    if (rc == 0 && !f) rc = err_set("%s: cannot read back", path);
    if (rc == 0 && (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)))
        rc = err_set("%s: cannot read back", path);
    if (rc == 0)
        rc = request(s, "/update_safetensors/", NULL, 0, "application/octet-stream", f,
                     (curl_off_t)size, 10, &status, &reply);
    if (f) fclose(f);
    unlink(path);
    if (rc != 0) return err_prefix("pushing the weights to the generation server");
    char message[400];
    answer_message(reply, message, sizeof message);
    free(reply);
    if (status == 404 || status == 405 || status == 501)
        return err_set("key 'trl.vllm_mode': server: %s does not take weights over HTTP (POST "
                       "/update_safetensors/ answered %ld: %s). rlhf.c pushes the policy's "
                       "weights to `rlhf serve` only; a vLLM server's NCCL weight sync "
                       "(init_communicator, update_named_param) is not supported",
                       s->url, status, message);
    if (status != 200)
        return err_set("key 'trl.vllm_mode': server: %s refused the policy's weights (POST "
                       "/update_safetensors/ answered %ld: %s)",
                       s->url, status, message);
    s->pushed = version;
    s->pushed_any = true;
    return 0;
}

/* TRL's GenerateRequest for these prompts and options. */
static json_t *generate_body(const int32_t *const *prompts, const int *lens, int n_prompts,
                             const GenerateOptions *opt) {
    json_t *list = json_array();
    for (int i = 0; i < n_prompts; i++) {
        json_t *ids = json_array();
        for (int t = 0; t < lens[i]; t++)
            json_array_append_new(ids, json_integer(prompts[i][t]));
        json_array_append_new(list, ids);
    }
    const SamplingParams *p = &opt->sampling;
    /* the seed as the in-process engine's (a uint64: sent as the int64 of the same bits, which
     * the server reads back as its uint64) */
    json_t *kwargs = json_pack("{s:I}", "seed", (json_int_t)opt->seed);
    /* the completion ends at the trainer's eos ids alone (vLLM's ignore_eos + stop_token_ids),
     * not at the server's generation_config ones, which may hold others */
    json_t *stop = json_array();
    for (int e = 0; e < opt->n_eos; e++)
        json_array_append_new(stop, json_integer(opt->eos_ids[e]));
    json_object_set_new(kwargs, "stop_token_ids", stop);
    json_object_set_new(kwargs, "ignore_eos", json_true());
    /* a later part of the batch: its completions draw from the streams after the earlier
     * parts' (rlhf serve's own key; sent only when needed, so a first part's request is TRL's) */
    if (opt->first_stream)
        json_object_set_new(kwargs, "first_stream", json_integer((json_int_t)opt->first_stream));
    return json_pack("{s:o,s:i,s:f,s:f,s:f,s:i,s:f,s:i,s:i,s:o}", "prompts", list, "n",
                     opt->n_per_prompt > 0 ? opt->n_per_prompt : 1, "repetition_penalty",
                     (double)p->repetition_penalty, "temperature",
                     p->do_sample ? (double)p->temperature : 0.0, "top_p", (double)p->top_p,
                     "top_k", p->top_k > 0 ? p->top_k : -1, "min_p", (double)p->min_p, "max_tokens",
                     opt->max_new_tokens, "logprobs", 0, "generation_kwargs", kwargs);
}

/* Where completion j ends as the in-process engine would stop it: after the first eos id, or
 * after the token that makes opt->stop_after true. */
static int cut_length(const GenerateOptions *opt, int j, const int32_t *ids, int len) {
    for (int t = 0; t < len; t++) {
        for (int e = 0; e < opt->n_eos; e++)
            if (ids[t] == opt->eos_ids[e]) return t + 1;
        if (opt->stop_after && opt->stop_after(j, ids, t + 1, opt->stop_ctx)) return t + 1;
    }
    return len;
}

/* Reads completion j (its ids and one-entry logprob lists) into c. */
static int read_completion(const json_t *ids, const json_t *lps, int j, const GenerateOptions *opt,
                           Completion *c) {
    size_t n = json_array_size(ids);
    if (!json_is_array(ids) || (int)n > opt->max_new_tokens)
        return err_set("completion_ids[%d] is not a list of at most max_tokens ids", j);
    c->ids = xmalloc((n ? n : 1) * sizeof *c->ids);
    c->logprobs = xmalloc((n ? n : 1) * sizeof *c->logprobs);
    for (size_t t = 0; t < n; t++) {
        const json_t *id = json_array_get(ids, t);
        const json_t *lp = json_array_get(json_array_get(lps, t), 0);
        if (!json_is_integer(id)) return err_set("completion_ids[%d][%zu] is not an id", j, t);
        c->ids[t] = (int32_t)json_integer_value(id);
        c->logprobs[t] = json_is_number(lp) ? (float)json_number_value(lp) : 0.0f;
    }
    c->len = cut_length(opt, j, c->ids, (int)n);
    return 0;
}

int vllm_server_generate(VllmServer *s, const int32_t *const *prompts, const int *prompt_lens,
                         int n_prompts, const GenerateOptions *opt, Completion *out) {
    int per = opt->n_per_prompt > 0 ? opt->n_per_prompt : 1, rows = n_prompts * per;
    memset(out, 0, (size_t)rows * sizeof *out);
    json_t *body = generate_body(prompts, prompt_lens, n_prompts, opt);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    long status = 0;
    char *reply = NULL;
    int rc = request(s, "/generate/", text, strlen(text), "application/json", NULL, 0, 10, &status,
                     &reply);
    free(text);
    if (rc != 0) return err_prefix("generation on the server");
    json_t *root = NULL;
    if (status != 200) {
        char message[400];
        answer_message(reply, message, sizeof message);
        rc = err_set("generation on the server %s: POST /generate/ answered %ld: %s", s->url,
                     status, message);
    } else if (json_load_text(reply, strlen(reply), "the /generate/ answer", &root) != 0) {
        rc = err_prefix("generation on the server %s", s->url);
    }
    free(reply);
    const json_t *ids = json_object_get(root, "completion_ids");
    const json_t *lps = json_object_get(root, "logprobs");
    if (rc == 0 && (int)json_array_size(ids) != rows)
        rc = err_set("generation on the server %s: %zu completions for %d prompts x %d", s->url,
                     json_array_size(ids), n_prompts, per);
    for (int j = 0; rc == 0 && j < rows; j++)
        if (read_completion(json_array_get(ids, (size_t)j), json_array_get(lps, (size_t)j), j, opt,
                            &out[j]) != 0)
            rc = err_prefix("generation on the server %s", s->url);
    json_decref(root);
    if (rc != 0) {
        completions_free(out, rows);
        memset(out, 0, (size_t)rows * sizeof *out);
    }
    return rc;
}
