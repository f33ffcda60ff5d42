/* Python is optional (CMake's RLHF_PYTHON; python/py_embed.h). In a build without it, a Python
 * reward function and a Python dataset transform are refused with one message that names the
 * config key and says how to get a build with Python, while built-in and command rewards open
 * as usual. In a build with Python the same reward function opens and the same example config
 * trains, so that the refusal can only come from the stand-ins (py_absent.c,
 * python_reward_absent.c, python_transform_absent.c). A Hub download is refused there too
 * (hub_python_absent.c), saying how to download the model instead. */
#include "cli/commands.h"
#include "common/error.h"
#include "harness.h"
#include "io/hub_resolve.h"
#include "python/py_embed.h"
#include "rewards/reward_registry.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Opens one reward spec (JSON text) as a config "grpo.yaml" names it; returns the status and
 * leaves the message in err_msg(). */
static int open_reward(const char *spec_json) {
    json_t *specs = json_loads(spec_json, 0, NULL);
    RewardFunc funcs[4];
    err_clear();
    int rc = reward_funcs_open(funcs, specs, "grpo.yaml", NULL);
    if (rc == 0) reward_funcs_close(funcs, (int)json_array_size(specs));
    json_decref(specs);
    return rc;
}

/* Built-in and command rewards need no Python: they open in every build. */
static void test_other_rewards_open(void) {
    CHECK(open_reward(
              "[\"builtin.accuracy\", {\"function\": \"builtin.length\", \"target\": 4}]") == 0,
          "%s", err_msg());
    CHECK(open_reward("[{\"command\": \"cat\", \"name\": \"echo\"}]") == 0, "%s", err_msg());
}

/* examples/rewards.py's closeness, named as examples/grpo.yaml names it. */
static void test_python_reward_function(void) {
    int rc = open_reward("[\"builtin.accuracy\", \"rewards.closeness\"]");
    if (py_embed_compiled()) {
        CHECK(rc == 0, "a Python build opens rewards.closeness: %s", err_msg());
        return;
    }
    CHECK(rc == -1, "a build without Python opened rewards.closeness");
    CHECK(strcmp(err_msg(), "grpo.yaml: trl.reward_funcs[1]: 'rewards.closeness' is a Python "
                            "reward function, but this build of rlhf has no Python (rebuild "
                            "with libpython3-dev installed, or -DRLHF_PYTHON=ON)") == 0,
          "the message: %s", err_msg());
    /* {function: module.fn} is the same function, refused the same way */
    CHECK(open_reward("[{\"function\": \"rewards.closeness\"}]") == -1 &&
              strstr(err_msg(), "'rewards.closeness' is a Python reward function, but this "
                                "build of rlhf has no Python"),
          "the mapping form: %s", err_msg());
    /* neither built-in nor module.fn: the message lists what this build does run */
    CHECK(open_reward("[\"closeness\"]") == -1 &&
              strstr(err_msg(), "expected builtin.<name>, {command: ...}, or a Python function "
                                "module.function, but this build of rlhf has no Python"),
          "a bare name: %s", err_msg());
    /* what the Python package would hand over (never dereferenced without Python) */
    static int not_an_object;
    CHECK(py_embed_keep_callable(&not_an_object, "reward function f") == -1 &&
              strstr(err_msg(), "reward function f is a Python callable, but this build of rlhf "
                                "has no Python"),
          "a Python callable: %s", err_msg());
    CHECK(strcmp(py_embed_version(), "") == 0, "no Python version: '%s'", py_embed_version());
}

/* examples/grpo.yaml as the README runs it: its dataset's rows go through
 * rewards.arithmetic_transform, the first Python it needs. */
static void test_python_transform_in_example(void) {
    char out[4200];
    snprintf(out, sizeof out, "%s", harness_tmp_path("grpo"));
    char *args[] = {"examples/grpo.yaml", "--output_dir", out, "--max_steps", "1"};
    err_clear();
    int rc = cli_train(5, args);
    if (py_embed_compiled()) {
        CHECK(rc == CLI_EXIT_OK, "a Python build trains examples/grpo.yaml: %s", err_msg());
        return;
    }
    CHECK(rc == CLI_EXIT_FAILURE, "a build without Python: exit %d", rc);
    /* "examples/grpo.yaml:<line of the entry>: datasets[0]: ..." */
    const char *want = "datasets[0]: dataset type 'rewards.arithmetic_transform' is a Python "
                       "dataset transform, but this build of rlhf has no Python (rebuild with "
                       "libpython3-dev installed, or -DRLHF_PYTHON=ON)";
    const char *msg = err_msg(), *colon = strchr(msg, ':');
    const char *rest = colon ? strstr(colon + 1, ": ") : NULL;
    CHECK(strncmp(msg, "examples/grpo.yaml:", 19) == 0 && rest && strcmp(rest + 2, want) == 0,
          "the message: %s", msg);
}

/* A Hub id not in the HF cache: offline, refused in C in every build, naming the download
 * command; online, a build without Python cannot download it (hub_python_absent.c) and says how
 * to get it instead. (A build with Python would try the network: tests/hub covers it.) */
static void test_hub_download(void) {
    CHECK(setenv("HF_HUB_CACHE", harness_tmp_path("empty-hf-cache"), 1) == 0, "setenv");
    CHECK(setenv("HF_HUB_OFFLINE", "1", 1) == 0, "setenv");
    char *dir = NULL;
    CHECK(hub_resolve("org/not-cached", NULL, HUB_MODEL, "key 'base_model'", &dir, NULL) != 0 &&
              strstr(err_msg(), "HF_HUB_OFFLINE") &&
              strstr(err_msg(), "hf download org/not-cached"),
          "offline: %s", err_msg());
    CHECK(unsetenv("HF_HUB_OFFLINE") == 0, "unsetenv");
    if (!py_embed_compiled()) {
        CHECK(hub_resolve("org/not-cached", "v2", HUB_MODEL, "key 'base_model'", &dir, NULL) != 0 &&
                  strstr(err_msg(), "has no Python") &&
                  strstr(err_msg(), "hf download org/not-cached --revision v2"),
              "no Python: %s", err_msg());
    }
    free(dir);
    unsetenv("HF_HUB_CACHE");
}

int main(void) {
    char root[4096];
    snprintf(root, sizeof root, "%s", harness_source_path("."));
    CHECK(chdir(root) == 0, "cd %s", root);
    /* examples/rewards.py, found next to the config as `rlhf train examples/grpo.yaml` finds it
     * (does nothing without Python) */
    CHECK(py_embed_add_path("examples") == 0, "%s", err_msg());
    printf("this build %s%s\n", py_embed_compiled() ? "embeds Python " : "has no Python",
           py_embed_version());
    test_other_rewards_open();
    test_python_reward_function();
    test_python_transform_in_example();
    test_hub_download();
    return harness_finish("test_python_optional");
}
