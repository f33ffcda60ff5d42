#include "train/stop_signal.h"

#include "common/error.h"
#include "dist/dist.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>

static volatile sig_atomic_t received;
static struct sigaction saved_int, saved_term;
static bool installed;

static void on_signal(int sig) {
    if (!received) received = sig;
    /* sigaction is async-signal-safe: the next SIGINT or SIGTERM goes where it went before we
     * installed ourselves. For the command line that is the default action (the process ends
     * at once); a program that embeds the library gets its own handler back (Python raises
     * KeyboardInterrupt at its next chance) instead of being killed. */
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGTERM, &saved_term, NULL);
}

void stop_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes in progress carry on; the loop checks later */
    received = 0;
    sigaction(SIGINT, &sa, &saved_int);
    sigaction(SIGTERM, &sa, &saved_term);
    installed = true;
}

void stop_signal_uninstall(void) {
    if (!installed) return;
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGTERM, &saved_term, NULL);
    installed = false;
}

int stop_signal_received(void) {
    return received;
}

void stop_signal_clear(void) {
    received = 0;
}

void stop_signal_request(void) {
    if (!received) received = STOP_SIGNAL_REQUESTED;
}

int stop_signal_error(int sig, int64_t step) {
    const char *why = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a stop request";
    return err_set("interrupted by %s: stopped after step %lld with checkpoint-%lld saved; run "
                   "again with resume_from_checkpoint: true to continue",
                   why, (long long)step, (long long)step);
}

int stop_signal_agree(void) {
    int sig = dist_allreduce_max_int(received);
    if (sig && !received) received = sig; /* this rank stops for the same reason as the one hit */
    return sig;
}
