/* python/py_embed.h in a build without Python (RLHF_PYTHON=OFF, or libpython not found): no
 * interpreter is ever started or hosted. Whatever would run Python is refused here or by the
 * other stand-ins (rewards/python_reward_absent.c, data/python_transform_absent.c), each with a
 * message naming the function or transform and ending in PY_EMBED_ABSENT. */
#include "python/py_embed.h"

#include "common/error.h"

bool py_embed_compiled(void) {
    return false;
}

const char *py_embed_version(void) {
    return "";
}

/* Nothing to extend: the caller goes on to open the reward functions and transforms, which
 * refuse with the config key that names them (a better message than one about a directory). */
int py_embed_add_path(const char *dir) {
    return 0;
}

int py_embed_keep_callable(void *object, const char *what) {
    return err_set("%s is a Python callable, " PY_EMBED_ABSENT, what);
}

void py_embed_release(void *object) {}

bool py_embed_running(void) {
    return false;
}

bool py_embed_hosted(void) {
    return false;
}

void py_embed_shutdown(void) {}
