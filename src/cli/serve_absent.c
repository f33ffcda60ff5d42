/* `rlhf serve` in a build without libmicrohttpd (-DRLHF_MICROHTTPD=OFF, or not installed): one
 * clear error saying what to install. */
#include "cli/commands.h"

#include <stdio.h>

int cli_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_fail("rlhf serve needs libmicrohttpd, which this build does not have: install it "
                    "(apt-get install libmicrohttpd-dev) and rebuild (cmake finds it)");
}
