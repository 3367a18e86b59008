use serde_json::json;

use super::*;
use crate::Message;

#[test]
fn a_completion_prompt_is_sent_as_prompt_and_content_with_special_tokens() {
    let body = remote_body("m", &Prompt::Text("hi".to_owned()));
    assert_eq!(
        body,
        json!({
            "model": "m", "prompt": "hi", "content": "hi",
            "add_special_tokens": true, "return_token_strs": false
        })
    );
}

#[test]
fn chat_messages_are_sent_with_the_generation_prompt_and_without_special_tokens() {
    let msg = Message {
        role: "user".to_owned(),
        content: "hi".to_owned(),
    };
    let body = remote_body("m", &Prompt::Messages(vec![msg]));
    assert_eq!(
        body,
        json!({
            "model": "m", "messages": [{"role": "user", "content": "hi"}],
            "add_special_tokens": false, "add_generation_prompt": true,
            "return_token_strs": false
        })
    );
}
