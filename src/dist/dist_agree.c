/* Agreement points (dist.h): how the ranks learn of each other's failures without waiting on a
 * rank that has stopped. Built the same with and without MPI: over one rank, each agreement is
 * the rank's own result. */
#include "dist/dist.h"

#include "common/error.h"

static bool agreed;
static int first_failed = -1;
static long passed;

int dist_agree(int rc) {
    passed++;
    if (dist_size() == 1) {
        agreed = rc != 0;
        first_failed = rc != 0 ? 0 : -1;
        return rc != 0 ? -1 : 0;
    }
    int size = dist_size();
    int first = dist_allreduce_min_int(rc != 0 ? dist_rank() : size);
    if (first == size) {
        first_failed = -1;
        return 0;
    }
    agreed = true;
    first_failed = first;
    if (rc == 0)
        return err_set("rank %d of %d failed (its error is printed by that rank)", first, size);
    return -1;
}

bool dist_failure_agreed(void) {
    return agreed;
}

int dist_first_failed_rank(void) {
    return first_failed;
}

long dist_agreements_passed(void) {
    return passed;
}
