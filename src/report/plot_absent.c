/* `rlhf plot` in a build without cairo (RLHF_CAIRO=OFF, or libcairo2-dev not found). */
#include "common/error.h"
#include "report/plot.h"

int plot_check_available(const char *out_path) {
    return err_set("%s: this build of rlhf has no cairo, which `rlhf plot` draws with (Debian: "
                   "apt-get install libcairo2-dev, then rebuild; or -DRLHF_CAIRO=ON)",
                   out_path);
}

int plot_write(const MetricSet *set, const char *title, const char *out_path) {
    return plot_check_available(out_path);
}
