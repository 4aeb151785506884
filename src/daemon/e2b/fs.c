/* NOT BUILT YET (#16, in progress): every handler answers 501 until its part lands. */
#include "daemon/e2b/e2b.h"
#include "daemon/server.h"

void e2b_fs_stat(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_stat is not built yet"); }
void e2b_fs_list_dir(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_list_dir is not built yet"); }
void e2b_fs_make_dir(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_make_dir is not built yet"); }
void e2b_fs_move(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_move is not built yet"); }
void e2b_fs_remove(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_remove is not built yet"); }
void e2b_fs_watch_dir(struct conn *c) { conn_reply_error(c, 501, "e2b_fs_watch_dir is not built yet"); }
void e2b_files_get(struct conn *c) { conn_reply_error(c, 501, "e2b_files_get is not built yet"); }
void e2b_files_post(struct conn *c) { conn_reply_error(c, 501, "e2b_files_post is not built yet"); }
void e2b_health(struct conn *c) { conn_reply_error(c, 501, "e2b_health is not built yet"); }
