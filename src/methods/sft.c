#include "methods/sft.h"

size_t sft_count_labels(const uint8_t *label_mask, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += label_mask[i] != 0;
    return count;
}

double sft_loss(const float *logp, const uint8_t *label_mask, size_t n, size_t n_window,
                float *dlogp) {
    double sum = 0.0;
    float d = n_window ? -1.0f / (float)n_window : 0.0f;
    for (size_t i = 0; i < n; i++) {
        dlogp[i] = label_mask[i] ? d : 0.0f;
        if (label_mask[i]) sum += logp[i];
    }
    return n_window ? -sum / (double)n_window : 0.0;
}
