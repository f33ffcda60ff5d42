#include "common/error.h"
#include "common/float16.h"
#include "model/model.h"

#include <stdlib.h>

int model_save_safetensors(const Model *m, const char *path, SafetensorsDtype dtype) {
    if (dtype != ST_F32 && dtype != ST_BF16 && dtype != ST_F16)
        return err_set("%s: weights can be saved as F32, BF16 or F16, not %s", path,
                       safetensors_dtype_name(dtype));
    int n = m->n_param_tensors;
    SafetensorsWriteTensor *t = xcalloc((size_t)n, sizeof *t);
    uint16_t *half = NULL;
    if (dtype != ST_F32) {
        half = xmalloc_checked(m->n_params * sizeof *half, "half-precision copy of the weights");
        if (!half) {
            free(t);
            return -1;
        }
        for (size_t i = 0; i < m->n_params; i++)
            half[i] = dtype == ST_BF16 ? f32_to_bf16(m->params[i]) : f32_to_f16(m->params[i]);
    }
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &m->param_info[i];
        t[i].name = p->name;
        t[i].dtype = dtype;
        t[i].ndim = p->ndim;
        t[i].shape[0] = p->shape[0];
        t[i].shape[1] = p->shape[1];
        t[i].data = half ? (const void *)(half + p->offset) : (const void *)(m->params + p->offset);
    }
    int rc = safetensors_write(path, t, (size_t)n);
    free(half);
    free(t);
    return rc;
}
