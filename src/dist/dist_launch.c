#include "dist/dist_launch.h"

#include "common/error.h"
#include "dist/dist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int planned;

void dist_launch_plan(int nproc) {
    planned = nproc;
}

int dist_planned_size(void) {
    return planned > 0 ? planned : dist_size();
}

int dist_launch(int nproc, int argc, char **argv) {
    const char *launcher = dist_launcher();
    if (!launcher)
        return err_set("--nproc %d: this rlhf was built without MPI (RLHF_MPI=OFF, or MPI was not "
                       "found): install libopenmpi-dev openmpi-bin and rebuild",
                       nproc);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return err_set("--nproc: cannot find this program: %s", strerror(errno));
    self[len] = '\0';
    if (!getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char threads[32];
        snprintf(threads, sizeof threads, "%ld", cores / nproc > 1 ? cores / nproc : 1);
        setenv("OMP_NUM_THREADS", threads, 1);
    }
    char np[16];
    snprintf(np, sizeof np, "%d", nproc);
    char **args = xcalloc((size_t)argc + 16, sizeof *args);
    int n = 0;
    args[n++] = (char *)launcher;
    args[n++] = "-np";
    args[n++] = np;
    if (dist_launcher_is_open_mpi()) {
        args[n++] = "--oversubscribe";
        args[n++] = "--bind-to";
        args[n++] = "none";
        if (geteuid() == 0) args[n++] = "--allow-run-as-root";
    }
    args[n++] = self;
    args[n++] = "train";
    for (int i = 0; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    fflush(NULL);
    execv(launcher, args);
    int e = errno;
    free(args);
    return err_set("--nproc %d: cannot run %s: %s", nproc, launcher, strerror(e));
}
