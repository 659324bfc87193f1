"""Old home of the helpers both apps share, now `conversations.utils`; its modules forward
there for one release."""
