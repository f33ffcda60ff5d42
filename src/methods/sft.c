#include "methods/sft.h"

#include <stdbool.h>

size_t sft_count_labels(const uint8_t *label_mask, size_t rows, size_t t_len) {
    size_t count = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 1; t < t_len; t++)
            count += label_mask[r * t_len + t] != 0;
    return count;
}

double sft_loss(const float *logp, const uint8_t *label_mask, size_t rows, size_t t_len,
                size_t n_window, float *dlogp) {
    double sum = 0.0;
    float d = n_window ? -1.0f / (float)n_window : 0.0f;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < t_len; t++) {
            size_t i = r * t_len + t;
            /* position 0 predicts nothing: no logp, no gradient, not counted (sft.h) */
            bool label = t > 0 && label_mask[i];
            dlogp[i] = label ? d : 0.0f;
            if (label) sum += logp[i];
        }
    return n_window ? -sum / (double)n_window : 0.0;
}
