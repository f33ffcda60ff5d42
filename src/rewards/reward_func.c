#include "rewards/reward_func.h"

#include <stdlib.h>

void reward_func_close(RewardFunc *f) {
    if (f->close && f->impl) f->close(f->impl);
    free(f->name);
    *f = (RewardFunc){0};
}
