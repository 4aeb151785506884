/* NOT BUILT YET (#16, in progress): every handler answers 501 until its part lands. */
#include "daemon/e2b/e2b.h"
#include "daemon/server.h"

void e2b_process_start(struct conn *c) { conn_reply_error(c, 501, "e2b_process_start is not built yet"); }
void e2b_process_connect(struct conn *c) { conn_reply_error(c, 501, "e2b_process_connect is not built yet"); }
void e2b_process_list(struct conn *c) { conn_reply_error(c, 501, "e2b_process_list is not built yet"); }
void e2b_process_send_input(struct conn *c) { conn_reply_error(c, 501, "e2b_process_send_input is not built yet"); }
void e2b_process_close_stdin(struct conn *c) { conn_reply_error(c, 501, "e2b_process_close_stdin is not built yet"); }
void e2b_process_send_signal(struct conn *c) { conn_reply_error(c, 501, "e2b_process_send_signal is not built yet"); }
void e2b_process_update(struct conn *c) { conn_reply_error(c, 501, "e2b_process_update is not built yet"); }
