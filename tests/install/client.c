/* Built by test_install.sh against an installed libspace, found through libspace.pc only:
 * asks the daemon at argv[1] for its health and prints the answer. */
#include <space/space.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
        if (argc != 2)
                return 2;
        space_client *c = NULL;
        int r = space_client_new(&c, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = argv[1] });
        if (r < 0) {
                fprintf(stderr, "space_client_new: %s\n", strerror(-r));
                return 1;
        }
        char *json = NULL;
        r = space_health(c, &json);
        if (r < 0) {
                fprintf(stderr, "space_health at %s: %s\n", space_client_host(c), space_client_last_error(c));
                space_client_free(c);
                return 1;
        }
        printf("%s\n", json);
        free(json);
        space_client_free(c);
        return 0;
}
