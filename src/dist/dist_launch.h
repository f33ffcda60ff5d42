/* `rlhf train --nproc N ...`: the convenience that starts N ranks on this machine through the
 * MPI launcher the build was made with, as `mpirun -np N rlhf train ...` would. */
#ifndef RLHF_DIST_DIST_LAUNCH_H
#define RLHF_DIST_DIST_LAUNCH_H

/* Replaces this process with `<launcher> -np nproc [options] <this program> train args...`
 * (args: what followed `train`, --nproc removed). With Open MPI the options are
 * --oversubscribe (more ranks than cores is allowed: slow, but it runs), --bind-to none (each
 * rank runs its own OpenMP threads; binding a rank to one core would starve them), and, as
 * root, --allow-run-as-root. OMP_NUM_THREADS, unless set, becomes the online cores / nproc (at
 * least 1), so that the ranks together use the machine once. Returns only on failure: -1 with
 * an error (no MPI in this build, or the launcher could not be run). */
int dist_launch(int nproc, int argc, char **argv);

/* How many ranks the job being configured has: dist_size(), or in the process that runs
 * --nproc N, once it has said so (dist_launch_plan), N. GRPO's batch geometry depends on it, so
 * the launcher checks a config as its ranks will read it. */
void dist_launch_plan(int nproc);
int dist_planned_size(void);

#endif
