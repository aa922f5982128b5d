//! The client side of the session: rmcp's `ClientHandler`, which routes progress to
//! the call that asked for it and counts `notifications/tools/list_changed`.
